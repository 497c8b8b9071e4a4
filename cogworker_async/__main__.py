from cogworker_async.cli import main

main()
