/* The cogworker-async protocol, as a SPIN model (docs/model.md; run: make model).
 *
 * Redis' structures are the global state; every Lua script is ONE atomic step, an
 * `inline <script>(...)` named as cogworker_async/redis/lua/<script>.lua (helpers that are
 * no script are named h_*: tests/test_model_names.py holds the two lists together).
 * Workers are processes that may crash between any two steps (their memory goes, Redis'
 * stays), be paused past the orphan threshold and come back (fencing), and recover each
 * other. A scenario is chosen with -DSCEN_JOBS (default), -DSCEN_BATCH, -DSCEN_UNSERVED,
 * -DSCEN_DEPS or -DSCEN_GROUPS; -DCHECK_<property> turns on a safety assertion;
 * -DMUTANT_<name> weakens a script; -DPREFIX_<name> is the code as it was before issue
 * 40's fixes (or of a later one: PREFIX_MARKER_GARBAGE, a marker without a TTL taken for
 * a beat's; -DCOTENANT lets a co-tenant plant one); -DLOSSY is a Redis whose failover may lose the last acknowledged write
 * (docs/reliability.md "Replication is asynchronous"), -DLOSSY -DDURABLE the same with
 * durability="replica", durability_replicas = all. model/check.py runs every combination
 * that matters.
 */

#define NW 2            /* worker processes (identities 0 and 1) */
#define MAXJ 7          /* job ids 1..MAXJ-1; 0 is "none" */

/* record states (_record.lua) */
#define R_NONE 0
#define R_QUEUED 1
#define R_RUNNING 2
#define R_RETRY 3
#define R_WAIT 4
#define R_SUCC 5
#define R_DEAD 6
#define R_CANC 7
/* ends (a job's, a note's, a batch member's); 4 = a member still pending */
#define E_SUCC 1
#define E_DEAD 2
#define E_CANC 3
#define M_PEND 4
/* batch states (_batch.lua) */
#define B_NONE 0
#define B_OPEN 1
#define B_RUNNING 2
#define B_SUCCESS 3
#define B_COMPLETE 4
#define B_DEAD 5
#define B_ABANDONED 6

/* ---------------------------------------------------------------- scenarios */
#if defined(SCEN_BATCH)
/* A batch opened (and sealed) by a client's block, members A (1) and M (2); A's run k
   reopens the batch in its own block (token k, a worker's: "<n>.r@<identity>") and adds
   member 2+k; the batch's "complete" callback is job 5. Defect 1: A killed inside. */
#define NJ 5
#define JA 1
#define CB 5
#define MAX_CRASH 1
#define MAX_PAUSE 0
#define MAX_FAIL 0
#define MAX_REFUSE 0
#define MAX_GIVEBACK 0
#define RETRIES 0
#define WORKFLOWS 1
#elif defined(SCEN_UNSERVED)
/* A batch of M (1, queue 0) and U (2, queue 1: no worker serves it), U cancelled by the
   client; the callback is job 3. Defect 5: notes relayed only for served queues. */
#define NJ 3
#define JA 0
#define CB 3
#define MAX_CRASH 1
#define MAX_PAUSE 0
#define MAX_FAIL 0
#define MAX_REFUSE 0
#define MAX_GIVEBACK 0
#define RETRIES 0
#define WORKFLOWS 1
#elif defined(SCEN_DEPS)
/* A chain of 2: C (2) runs after P (1), on_parent_failure="cancel"; the enqueuer may die
   between its steps (arming), P may fail for good, the client may cancel C, the record
   sweep may find P's record past its bound (a paused queue). Defect 4. */
#define NJ 2
#define JP 1
#define JC 2
#define JA 0
#define CB 0
#define MAX_CRASH 1
#define MAX_PAUSE 0
#define MAX_FAIL 1
#define MAX_REFUSE 0
#define MAX_GIVEBACK 0
#define RETRIES 0
#define WORKFLOWS 1
#elif defined(SCEN_GROUPS)
/* Three jobs of one fair group, group_limits = 1, two workers; one crash (its job keeps
   its slot until recovery takes its list), one failure (retried). No pause: recovery of
   a process paused past the threshold frees its slot while its run may go on, the
   at-least-once window of no_rerun, which group_limit does not claim to close. */
#define NJ 3
#define JA 0
#define CB 0
#define GLIMIT 1
#define MAX_CRASH 1
#define MAX_PAUSE 0
#define MAX_FAIL 1
#define MAX_REFUSE 0
#define MAX_GIVEBACK 0
#define RETRIES 1
#else
#define SCEN_JOBS 1
/* Two jobs on one queue, two workers; one crash, one pause past the threshold, one
   failure (retried), one refused destination write, one give-back, a cancel of job 2. */
#define NJ 2
#define JA 0
#define CB 0
#define MAX_CRASH 1
#define MAX_PAUSE 1
#define MAX_FAIL 1
#ifdef LIGHT   /* the liveness runs: refusals and give-backs are safety matters */
#define MAX_REFUSE 0
#define MAX_GIVEBACK 0
#else
#define MAX_REFUSE 1
#define MAX_GIVEBACK 1
#endif
#define RETRIES 1
#endif

/* ---------------------------------------------------------------- Redis' state */
bool inq[MAXJ];        /* on its queue's list */
byte ip[MAXJ];         /* bit w: on in_progress:<w> */
bool retry[MAXJ];      /* retry zset */
bool deadset[MAXJ];    /* dead zset */
byte rec[MAXJ];        /* status record's state */
bool cflag[MAXJ];      /* record's cancel="1": the next move drops the copy */
bool rbatch[MAXJ];     /* record names the batch (a member) */
bool rwatch[MAXJ];     /* record says it is watched ("*") */
byte note[MAXJ];       /* its end noted in its queue's batch_notes (0: none) */
bool note_w[MAXJ];     /* the note names watchers */
byte qof[MAXJ];        /* its queue: 0 (served) or 1 (served by no worker) */
bool marker[NW];       /* process:<w> alive marker (and a fresh last beat) */
bool planted[NW];      /* a co-tenant's key at that marker's name, with no TTL (COTENANT) */
bool declared[NW];     /* declared_dead */
bool forgotten[NW];    /* registries forgotten (forget.lua) */
/* batch (one) */
byte bstate;
bool sealed;
byte holders;          /* bit 0: the client's block; bit k: A's run k */
byte tok_owner[3];
byte mem[MAXJ];        /* member sets: pending / succeeded / dead / cancelled */
byte orphans;          /* the hash's "orphans" mark: a dead block let go of, not yet
                          repaired (0: none); bumped by each such release and each seal */
bool fire, fired, decided;
/* dependencies: C waits for P */
bool dep;              /* C's dep hash (its only copy while it waits) */
bool pend;             /* P in C's pending set */
bool arming;           /* C in the queue's arming set */
bool watchers;         /* C in P's watchers set */

/* ---------------------------------------------------------------- ghosts */
bool enq[MAXJ];        /* enqueued */
byte fin[MAXJ];        /* how it ended for good (0: not yet) */
bool ran_ok[MAXJ];     /* a run of it returned */
bool window[MAXJ];     /* its process died / was paused past the threshold holding it */
bool cancel_said[MAXJ];/* cancel answered "cancelled": it must never start */
byte cb_count;         /* callbacks pushed */
byte crashes, pauses, fails, refusals, givebacks;
#ifdef LOSSY
byte failovers;        /* failovers that lost a write (at most one) */
bool lost_ack[MAXJ];   /* its ack was acknowledged, then lost by a failover */
#define ACK_LOST(t) lost_ack[t]
#define FO fo
#else
#define ACK_LOST(t) 0
#define FO 0
#endif
bool crashed[NW];
byte runs_a;           /* runs of A (its token) */

/* ---------------------------------------------------------------- properties */
#define ENDED(j) (fin[j] != 0)
#define PLACED(j) (inq[j] || ip[j] != 0 || retry[j] || deadset[j] || fin[j] != 0 \
                   || (j == JC_ && dep))
#ifdef SCEN_DEPS
#define JC_ JC
#else
#define JC_ 99
#endif
#define LOST(j) (enq[j] && !PLACED(j))
#define BFINAL (bstate >= B_SUCCESS)

#ifdef CHECK_no_rerun
#define A_no_rerun(c) assert(c)
#else
#define A_no_rerun(c) skip
#endif
#ifdef CHECK_cancelled_never_starts
#define A_cancelled_never_starts(c) assert(c)
#else
#define A_cancelled_never_starts(c) skip
#endif
#ifdef CHECK_callback_once
#define A_callback_once(c) assert(c)
#else
#define A_callback_once(c) skip
#endif
#ifdef CHECK_dependent_after_parents
#define A_dependent_after_parents(c) assert(c)
#else
#define A_dependent_after_parents(c) skip
#endif
#ifdef CHECK_callback_after_members
#define A_callback_after_members(c) assert(c)
#else
#define A_callback_after_members(c) skip
#endif
#ifdef CHECK_batch_sealed_unheld
#define A_batch_sealed_unheld(c) assert(c)
#else
#define A_batch_sealed_unheld(c) skip
#endif
#ifdef CHECK_group_limit
#define A_group_limit(c) assert(c)
#else
#define A_group_limit(c) skip
#endif

/* no_job_lost — docs/reliability.md "Nothing is lost between structures": every job
   enqueued is in some place (a list, a set, a dep hash) or has ended. */
ltl no_job_lost { [] !(LOST(1) || LOST(2) || LOST(3) || LOST(4) || LOST(5) || LOST(6)) }
/* jobs_end — "A crashed process's jobs come back" + "Every wait ends": under weak
   fairness every job enqueued eventually succeeds, is filed dead or is cancelled. */
ltl jobs_end { <> [] ((!enq[1] || ENDED(1)) && (!enq[2] || ENDED(2)) && (!enq[3] || ENDED(3))
                   && (!enq[4] || ENDED(4)) && (!enq[5] || ENDED(5)) && (!enq[6] || ENDED(6))) }
/* batch_ends — "Liveness: every wait ends", a batch: it reaches a final state and its
   callbacks are enqueued (exactly once with callback_once), or it ends abandoned. */
ltl batch_ends { <> [] (BFINAL && (bstate == B_ABANDONED || (fired && cb_count == 1))) }
/* waits_end — "Liveness: every wait ends", a waiting job (after=): it is eventually
   released, cancelled or filed dead (its dep hash gone). */
ltl waits_end { <> [] (!dep && !arming) }

/* ---------------------------------------------------------------- helpers (no script) */
/* _record.lua lib_write: a record reaching a final state notes the end for its batch and
   its watchers in its queue's notes list, in the same step (n = 0: the caller writes it) */
inline h_endrec(j, st, e, n) {
  if
  :: n && rec[j] != R_NONE && rec[j] != st && (rbatch[j] || rwatch[j]) ->  /* noted once */
     note[j] = e; note_w[j] = rwatch[j]
  :: else -> skip
  fi;
  rec[j] = st;
  fin[j] = e
}
/* a destination write Redis may refuse (a key of the wrong type, OOM): r = 1 */
inline h_refused(r) {
  if
  :: refusals < MAX_REFUSE -> refusals++; r = 1
  :: true -> r = 0
  fi
}
/* _queue.lua push: onto its queue; refused (r = 1) writes nothing */
inline h_push(j, r) {
  h_refused(r);
  if :: !r -> inq[j] = 1 :: else -> skip fi
}
/* the crash and pause points: between any two steps of a worker */
inline h_mark_window(w) {
  /* (a job whose ack a failover lost was settled: its rerun is no window, see LOSSY) */
  for (t : 1 .. NJ) {
    if :: ((ip[t] & (1 << w)) || cur == t) && !ACK_LOST(t) -> window[t] = 1 :: else -> skip fi
  }
}
inline h_chaos(w) {
  if
  :: crashes < MAX_CRASH -> atomic { crashes++; crashed[w] = 1; marker[w] = 0; h_mark_window(w) };
     goto gone
  :: pauses < MAX_PAUSE -> atomic { pauses++; marker[w] = 0; h_mark_window(w) } /* resumes later */
#ifdef COTENANT
  :: !planted[w] -> planted[w] = 1 /* garbage at its marker's name: no beat's, no TTL */
#endif
  :: true -> skip
  fi
}
/* _batch.lua batch_decide */
inline h_decide() {
  if
  :: bstate != B_NONE && sealed && !BFINAL ->
     A_batch_sealed_unheld(holders == 0);
     t = 0; for (u : 1 .. NJ) { if :: mem[u] == M_PEND -> t = 1 :: else -> skip fi };
     if
     :: t == 0 ->
        bstate = B_SUCCESS;
        for (u : 1 .. NJ) {
          if
          :: mem[u] == E_DEAD -> bstate = B_DEAD
          :: mem[u] == E_CANC && bstate == B_SUCCESS -> bstate = B_COMPLETE
          :: else -> skip
          fi
        };
        if :: !decided -> fire = 1; decided = 1 :: else -> skip fi
     :: else -> bstate = B_RUNNING
     fi
  :: else -> skip
  fi
}

/* LOSSY: a failover to a replica that had not received the last write, right after the
   master acknowledged it (the same atomic step: no later write reached the replica
   either). docs/reliability.md "Replication is asynchronous": an enqueue lost (the
   caller was told it was done: enq stays, the job is nowhere) or an ack lost (the job
   stays on its list, the worker believes it settled: it runs again once recovery takes
   that list). One failover. With DURABLE (durability="replica", durability_replicas =
   every replica: WAIT for all) an acknowledged write is on every replica, so no failover
   can revert it: the step is empty. lost = 1: this write was lost. */
inline h_failover(lost) {
  lost = 0;
#if defined(LOSSY) && !defined(DURABLE)
  if :: failovers < 1 -> failovers++; lost = 1 :: true -> skip fi
#endif
}

/* ---------------------------------------------------------------- the scripts */
/* enqueue.lua (mode "once" for a callback: a jid with any record is refused) */
inline enqueue(j, once) {
  atomic {
#ifdef MUTANT_CALLBACK_NO_REFUSAL
    if :: true ->
#else
    if :: !once || rec[j] == R_NONE ->
#endif
       inq[j] = 1; rec[j] = R_QUEUED; enq[j] = 1;
#ifdef LOSSY
       h_failover(fo); if :: fo -> inq[j] = 0; rec[j] = R_NONE :: else -> skip fi; fo = 0;
#endif
       if :: once -> cb_count++; A_callback_once(cb_count <= 1) :: else -> skip fi;
#ifdef CHECK_callback_after_members
       /* callback_after_members — docs/reliability.md "a batch's callbacks": a batch's
          callback comes after its members: every member pushed has ended (one counted
          cancelled by the repair must have had no job behind it) */
       if :: once -> for (u : 1 .. CB - 1) { A_callback_after_members(!enq[u] || fin[u] != 0) }
          :: else -> skip fi;
#endif
       skip
    :: else -> skip
    fi
  }
}
/* fetch.lua: the lowest queued job of queue 0 onto this process's in-progress list, its
   record running; a job whose cancel waits is dropped unrun instead. j: 0 if none. */
inline fetch(w, j) {
  atomic {
    j = 0;
    for (t : 1 .. NJ) { if :: j == 0 && inq[t] && qof[t] == 0 -> j = t :: else -> skip fi };
#ifdef GLIMIT
    /* a group at its limit is passed over: its running count is counted from the
       in-progress lists, in this step (a crashed process's list counts until recovery
       takes it) */
    gc = 0;
    for (u : 1 .. NJ) {
      if
#ifdef MUTANT_GROUP_SLOT_FREED_BEFORE_SETTLE
      :: ip[u] != 0 && !ran_ok[u] -> gc++   /* a run that returned no longer counted */
#else
      :: ip[u] != 0 -> gc++
#endif
      :: else -> skip
      fi
    };
    if :: gc >= GLIMIT -> j = 0 :: else -> skip fi;
    gc = 0;
#endif
    if
#ifndef MUTANT_FETCH_IGNORES_CANCEL
    :: j != 0 && cflag[j] -> inq[j] = 0; h_endrec(j, R_CANC, E_CANC, 1); j = 0
    :: j != 0 && !cflag[j] ->
#else
    :: j != 0 ->
#endif
       ip[j] = ip[j] | (1 << w); inq[j] = 0; rec[j] = R_RUNNING;
       A_cancelled_never_starts(!cancel_said[j]);
#ifdef GLIMIT
       /* group_limit — docs/guides/who-runs-next.md "A limit per group" (and the fair
          groups of docs/reliability.md): at most group_limits jobs of a group run at
          once, across every process; a job runs from its fetch to its settle (ack,
          filing, give-back), on a live process (a crashed one runs nothing) */
       for (u : 1 .. NJ) {
         if :: (ip[u] & 1) && !crashed[0] -> gc++ :: else -> skip fi;
         if :: (ip[u] & 2) && !crashed[1] -> gc++ :: else -> skip fi
       };
       A_group_limit(gc <= GLIMIT);
       gc = 0;
#endif
#ifdef SCEN_DEPS
       A_dependent_after_parents(j != JC || fin[JP] == E_SUCC);
#endif
    :: else -> skip
    fi
  }
}
/* ack.lua: the job leaves the list and its record says how it ended (with the note), one
   step; a job no longer there (recovered from a fenced process) is left alone. */
inline ack(w, j, e) {
  atomic {
#ifdef LOSSY
    h_failover(fo);
    if :: fo && (ip[j] & (1 << w)) -> lost_ack[j] = 1 :: else -> fo = 0 fi;   /* nothing kept */
#endif
    if
    :: (ip[j] & (1 << w)) && !FO ->
#ifdef MUTANT_ACK_SOURCE_FIRST
       ip[j] = ip[j] & ~(1 << w)
    :: else -> skip
    fi
  };
  h_chaos(w);  /* the record written by a second call */
  atomic {
    if
    :: fin[j] == 0 && !inq[j] && ip[j] == 0 && !retry[j] ->
#endif
#ifdef MUTANT_NOTE_OUTSIDE_SETTLE
       h_endrec(j, (e == E_SUCC -> R_SUCC : R_CANC), e, 0);
#else
       h_endrec(j, (e == E_SUCC -> R_SUCC : R_CANC), e, 1);
#endif
       ip[j] = ip[j] & ~(1 << w)
    :: else -> skip
    fi;
#ifdef LOSSY
    fo = 0;
#endif
    skip
  }
}
/* file_failure.lua: into retry (or dead), then off the list; written before removed */
inline file_failure(w, j, r) {
  atomic {
    r = 0;
    if
    :: ip[j] & (1 << w) ->
#ifdef MUTANT_FILE_FAILURE_REMOVES_FIRST
       ip[j] = ip[j] & ~(1 << w);
#endif
       h_refused(r);
       if
       :: !r && fails <= RETRIES && !cflag[j] -> retry[j] = 1; rec[j] = R_RETRY
       :: !r && (fails > RETRIES || cflag[j]) -> deadset[j] = 1; h_endrec(j, R_DEAD, E_DEAD, 1)
       :: else -> skip
       fi;
       if :: !r -> ip[j] = ip[j] & ~(1 << w) :: else -> skip fi
    :: else -> skip
    fi
  }
}
/* give_back.lua: a job that never started back to the front of its queue */
inline give_back(w, j, r) {
  atomic {
    r = 0;
    if
    :: (ip[j] & (1 << w)) && cflag[j] -> ip[j] = ip[j] & ~(1 << w); h_endrec(j, R_CANC, E_CANC, 1)
    :: (ip[j] & (1 << w)) && !cflag[j] ->
#ifdef MUTANT_GIVE_BACK_REMOVES_FIRST
       ip[j] = ip[j] & ~(1 << w);
#endif
       h_push(j, r);
       if :: !r -> ip[j] = ip[j] & ~(1 << w); rec[j] = R_QUEUED :: else -> skip fi
    :: else -> skip
    fi
  }
}
/* promote.lua: due retries back on the queue (or dropped, a cancel waiting) */
inline promote(w) {
  atomic {
    for (t : 1 .. NJ) {
      if
      :: retry[t] && cflag[t] -> retry[t] = 0; h_endrec(t, R_CANC, E_CANC, 1)
      :: retry[t] && !cflag[t] ->
#ifdef MUTANT_PROMOTE_POPS_FIRST
         retry[t] = 0;
#endif
         h_push(t, r);
         if :: !r -> retry[t] = 0; rec[t] = R_QUEUED :: else -> skip fi
      :: else -> skip
      fi
    }
  }
}
/* beat.lua: alive again; z = 1 if recovery declared it dead meanwhile (a zombie) */
inline beat(w, z) {
  atomic { z = declared[w]; marker[w] = 1; planted[w] = 0 } /* SET PX: over any key */
}
/* requeue.lua (recovery): the list of a process that looks dead (no alive marker, no
   recent beat: the fence check, in the same step) back on the queue; a job whose
   cancel waits is dropped; the owner is marked declared_dead. */
inline requeue(w, v) {
  atomic {
#if defined(MUTANT_RECOVERY_SKIPS_FENCE)
    if :: true ->
#elif defined(PREFIX_MARKER_GARBAGE)
    if :: !marker[v] && !planted[v] -> /* any key at the marker's name taken for a beat's */
#else
    if :: !marker[v] -> /* a key there without a TTL is none (PTTL > 0: a beat's) */
#endif
       for (t : 1 .. NJ) {
         if
         :: (ip[t] & (1 << v)) && cflag[t] ->
            ip[t] = ip[t] & ~(1 << v); h_endrec(t, R_CANC, E_CANC, 1); declared[v] = 1
         :: (ip[t] & (1 << v)) && !cflag[t] ->
            inq[t] = 1; ip[t] = ip[t] & ~(1 << v); rec[t] = R_QUEUED; declared[v] = 1;
            /* the documented window: taken from a process silent past the threshold */
            if :: !marker[v] && !ACK_LOST(t) -> window[t] = 1 :: else -> skip fi
         :: else -> skip
         fi
       }
    :: else -> skip
    fi
  }
}
/* forget.lua: a process with an empty list and no alive marker leaves the registries */
inline forget(w, v) {
  atomic {
    t = 0; for (u : 1 .. NJ) { if :: ip[u] & (1 << v) -> t = 1 :: else -> skip fi };
#ifdef PREFIX_MARKER_GARBAGE
    if :: t == 0 && !marker[v] && !planted[v] -> forgotten[v] = 1 :: else -> skip fi
#else
    if :: t == 0 && !marker[v] -> forgotten[v] = 1 :: else -> skip fi
#endif
  }
}
/* cancel.lua: queued/retrying: cancel="1", the record ends cancelled (noted), the copy is
   dropped by its next move; running: "stopping" (cflag, its process stops it); waiting:
   the dep hash, pending, waiting and arming go, cancelled. */
inline cancel(j) {
  atomic {
    if
    :: rec[j] == R_QUEUED || rec[j] == R_RETRY ->
       cflag[j] = 1; h_endrec(j, R_CANC, E_CANC, 1); cancel_said[j] = 1
    :: rec[j] == R_RUNNING -> cflag[j] = 1
#ifdef SCEN_DEPS
    :: rec[j] == R_WAIT ->
#ifndef MUTANT_CANCEL_SKIPS_WAITING
       dep = 0; pend = 0; arming = 0; h_endrec(j, R_CANC, E_CANC, 1);
#endif
       cancel_said[j] = 1
#endif
    :: else -> skip
    fi
  }
}

#ifdef WORKFLOWS
/* batch_open.lua: open (new) or reopen (not ended) with this block's token */
inline batch_open(k, w, ok) {
  atomic {
    if
    :: bstate == B_NONE && k == 0 -> bstate = B_OPEN; sealed = 0; holders = 1; ok = 1
    :: bstate != B_NONE && !BFINAL -> sealed = 0; holders = holders | (1 << k); tok_owner[k] = w; ok = 1
    :: else -> ok = 0   /* ENDED */
    fi
  }
}
/* batch_add.lua: a member joins before it is enqueued (destination first) */
inline batch_add(j, ok) {
  atomic {
    if
    :: bstate != B_NONE && !sealed && !BFINAL ->
       if :: mem[j] == 0 -> mem[j] = M_PEND :: else -> skip fi; ok = 1
    :: else -> ok = 0   /* SEALED */
    fi
  }
}
/* batch_seal.lua: the block exits with its token; sealed once no block holds it (a
   marked batch's mark is bumped: a repair read before this seal is refused) */
inline batch_seal(k) {
  atomic {
    holders = holders & ~(1 << k);
    if :: orphans != 0 -> orphans++ :: else -> skip fi;
#ifdef MUTANT_SEAL_ONE_HOLDER
    if :: (holders & 1) == 0 -> sealed = 1; h_decide() :: else -> skip fi
#else
    if :: holders == 0 -> sealed = 1; h_decide() :: else -> skip fi
#endif
  }
}
/* batch_release.lua (worker/batch_reaper.py): tokens of worker processes that are gone
   (forgotten) are let go of; a batch no block holds is sealed and decided. The batch is
   marked (orphans): a dead block may have joined a member it never pushed (add_window);
   it is repaired by batch_repair once no block holds it. */
inline batch_release(w) {
  atomic {
    t = 0;
    for (u : 1 .. 2) {
      if
      :: (holders & (1 << u)) && forgotten[tok_owner[u]] -> holders = holders & ~(1 << u); t = 1
      :: else -> skip
      fi
    };
#ifndef PREFIX_ADD_WINDOW
    if :: t -> orphans++ :: else -> skip fi;
#endif
    if
    :: t && holders == 0 && !BFINAL -> sealed = 1; h_decide()
    :: else -> skip
    fi
  }
}
/* worker/batch_reaper.py _repair, its reads (no script): a marked batch no block holds —
   its mark and state (om, ost), then the pending members with no record (nv, a bitmask);
   om = 0: nothing to repair. Two reads, as the code makes them: a block may reopen the
   batch between them. */
inline h_repair_read(om, ost, nv) {
  atomic {
    om = 0; nv = 0;
#ifdef MUTANT_REPAIR_WHILE_HELD
    if :: orphans != 0 -> om = orphans; ost = bstate :: else -> skip fi
#else
    if :: holders == 0 && orphans != 0 -> om = orphans; ost = bstate :: else -> skip fi
#endif
  };
  atomic {
    if
    :: om != 0 ->
       for (u : 1 .. NJ) {
         if :: mem[u] == M_PEND && rec[u] == R_NONE -> nv = nv | (1 << u) :: else -> skip fi
       }
    :: else -> skip
    fi
  }
}
/* batch_repair.lua: if no block holds the batch and its mark and state are as read, the
   members read with no record count cancelled, the batch is decided, the mark goes;
   otherwise nothing (the next pass reads again). (An abandoned batch's other pending
   members are cancelled first by the reaper: no modelled opener dies, see docs.) */
inline batch_repair(om, ost, nv) {
  atomic {
    if
#ifdef MUTANT_REPAIR_WHILE_HELD
    :: om != 0 && orphans == om && bstate == ost ->
#else
    :: om != 0 && holders == 0 && orphans == om && bstate == ost ->
#endif
       for (u : 1 .. NJ) {
         if :: (nv & (1 << u)) && mem[u] == M_PEND -> mem[u] = E_CANC :: else -> skip fi
       };
       orphans = 0;
       h_decide()
    :: else -> skip
    fi
  }
}
/* batch_apply.lua: a member's end, relayed from its note, moves it out of pending */
inline batch_apply(j, e) {
  atomic {
    if
    :: mem[j] == M_PEND || (mem[j] == E_DEAD && e == E_SUCC) -> mem[j] = e
    :: else -> skip
    fi;
    h_decide()
  }
}
/* drop_notes.lua: applied notes leave the queue's notes list */
inline drop_notes(j) {
  atomic { note[j] = 0; note_w[j] = 0 }
}
/* batch_fired.lua: the callbacks enqueued are no longer due */
inline batch_fired() {
  atomic { fire = 0; fired = 1 }
}
#endif

#ifdef SCEN_DEPS
/* dep_wait.lua: C's copy, its pending parents and its record, in one step (in arming) */
inline dep_wait() {
  atomic { dep = 1; pend = 1; arming = 1; rec[JC] = R_WAIT; enq[JC] = 1 }
}
/* dep_watch.lua: C watches P (set, then record's mark), or P's end is returned (e) */
inline dep_watch(e) {
  atomic {
    if
    :: rec[JP] == R_NONE -> e = E_DEAD   /* unknown counts as dead (dependencies.py) */
    :: rec[JP] >= R_SUCC -> e = (rec[JP] == R_SUCC -> E_SUCC : (rec[JP] == R_DEAD -> E_DEAD : E_CANC))
    :: else -> watchers = 1; rwatch[JP] = 1; e = 0
    fi
  }
}
/* dep_apply.lua: P's end (e; 0: none) reaches C; the last one releases it (pushed, then
   the copy deleted), or a failed parent cancels it (on_parent_failure="cancel") */
inline dep_apply(e, armed) {
  atomic {
    if
    :: !dep -> arming = 0
    :: dep && cflag[JC] -> dep = 0; pend = 0; arming = 0
    :: else ->
       if :: armed -> arming = 0 :: else -> skip fi;
       if :: e != 0 && pend -> pend = 0; t = e :: else -> t = 0 fi;
       if
       :: t == E_DEAD || t == E_CANC -> dep = 0; arming = 0; h_endrec(JC, R_CANC, E_CANC, 1)
#ifdef MUTANT_DEP_APPLY_EARLY
       :: t != E_DEAD && t != E_CANC ->   /* released without looking at pending */
#else
       :: t != E_DEAD && t != E_CANC && !pend ->
#endif
          inq[JC] = 1; dep = 0; arming = 0; rec[JC] = R_QUEUED
       :: else -> skip
       fi
    fi
  }
}
/* sweep_records.lua: a live record past its bound is dropped — kept while jobs watch it */
inline sweep_records() {
  atomic {
#ifdef PREFIX_SWEEP
    if :: rec[JP] == R_QUEUED -> rec[JP] = R_NONE; rwatch[JP] = 0 :: else -> skip fi
#else
    if :: rec[JP] == R_QUEUED && !(rwatch[JP] && watchers) -> rec[JP] = R_NONE; rwatch[JP] = 0
       :: else -> skip fi
#endif
  }
}
#endif

/* ---------------------------------------------------------------- processes */
proctype worker(byte w) {
  byte j, k, q, e, r, cur;
#ifdef WORKFLOWS
  byte om, ost, nv;   /* the repair's reads (h_repair_read) */
#endif
  byte t, u;   /* scratch of one atomic step */
  bool z, ok;
#ifdef GLIMIT
  byte gc;     /* fetch's count of the group's running jobs (scratch) */
#endif
#ifdef LOSSY
  bool fo;     /* h_failover: the write just acknowledged was lost (scratch) */
#endif
  do
  :: beat(w, z);
     if :: z -> atomic { declared[w] = 0; cur = 0 } :: else -> skip fi;  /* fenced */
     /* upkeep: recovery of the other process, promotion, the relay */
     requeue(w, 1 - w); h_chaos(w);
     forget(w, 1 - w);
     promote(w); h_chaos(w);
#ifdef WORKFLOWS
     /* notes_relay.py: the notes of the served queue, then (every 5 s, one worker) of the
        queues no worker serves, then the reaper, then the callbacks due */
     for (q : 0 .. 1) {
#ifdef PREFIX_UNSERVED
       if :: q == 1 -> break :: else -> skip fi;
#endif
       for (k : 1 .. NJ) {
         if
         :: note[k] != 0 && qof[k] == q ->
            e = note[k];
#ifdef MUTANT_RELAY_DROPS_FIRST
            drop_notes(k); h_chaos(w);
#endif
            if :: rbatch[k] -> batch_apply(k, e); h_chaos(w) :: else -> skip fi;
#ifdef SCEN_DEPS
            if :: note_w[k] && watchers -> dep_apply(e, 0); h_chaos(w) :: else -> skip fi;
#endif
#ifndef MUTANT_RELAY_DROPS_FIRST
            drop_notes(k); h_chaos(w)
#endif
         :: else -> skip
         fi
       }
     };
#ifndef PREFIX_HOLDER
     batch_release(w); h_chaos(w);
#endif
#ifndef PREFIX_ADD_WINDOW
     h_repair_read(om, ost, nv); h_chaos(w);
     if :: om != 0 -> batch_repair(om, ost, nv); h_chaos(w) :: else -> skip fi;
     atomic { om = 0; ost = 0; nv = 0 };
#endif
     if
     :: fire -> enqueue(CB, 1); h_chaos(w); batch_fired(); h_chaos(w)
     :: else -> skip
     fi;
#endif
#ifdef SCEN_DEPS
     if   /* dependencies.rearm: arm again a job whose enqueuer died before watching */
     :: arming -> dep_watch(e); h_chaos(w); dep_apply(e, 1); h_chaos(w)
     :: else -> skip
     fi;
     if :: sweep_records() :: skip fi;   /* a sweep pass, at any time */
#endif
     /* fetch a job, run it, settle it */
     fetch(w, j);
     if
     :: j != 0 ->
        cur = j; h_chaos(w);
        if
        :: givebacks < MAX_GIVEBACK -> givebacks++;   /* it never started: the worker stops */
           do :: give_back(w, j, r); if :: !r -> break :: else -> h_chaos(w) fi od
        :: else ->
#if JA != 0
           if
           :: j == JA ->   /* A's block: reopen the batch, add a member, seal */
              runs_a++; k = runs_a;
              batch_open(k, w, ok); h_chaos(w);
              if
              :: ok -> batch_add(2 + k, ok);
                 h_chaos(w);  /* a crash between the add and the push (add_window) */
                 if :: ok -> rbatch[2 + k] = 1; enqueue(2 + k, 0); h_chaos(w) :: else -> skip fi;
                 batch_seal(k); h_chaos(w)
              :: else -> skip
              fi
           :: else -> skip
           fi;
#endif
           if
           :: cflag[j] -> ack(w, j, E_CANC)     /* stopped: its cancel came */
           :: fails < MAX_FAIL -> fails++;    /* it raised */
              do :: file_failure(w, j, r); if :: !r -> break :: else -> h_chaos(w) fi od
           :: true ->
              A_no_rerun(!ran_ok[j] || window[j]);
              ran_ok[j] = 1; h_chaos(w);
              beat(w, z);                       /* the beat thread, before the settle */
              if
              :: z -> atomic { declared[w] = 0; cur = 0 }   /* fenced: no settle */
              :: else -> ack(w, j, E_SUCC);
#ifdef MUTANT_NOTE_OUTSIDE_SETTLE
                 h_chaos(w);
                 atomic { if :: rec[j] != R_NONE && rbatch[j] && note[j] == 0 -> note[j] = E_SUCC :: else -> skip fi }
#endif
                 skip
              fi
           fi
        fi;
        h_chaos(w)
     :: else -> skip
     fi;
     atomic { j = 0; k = 0; q = 0; e = 0; r = 0; z = 0; ok = 0; cur = 0; t = 0; u = 0 }
  od;
gone:
  atomic { j = 0; k = 0; q = 0; e = 0; r = 0; z = 0; ok = 0; cur = 0; t = 0; u = 0 }
}

/* the client: enqueues, blocks, cancels; it never crashes but in SCEN_DEPS */
proctype client() {
  byte e, t, u;
  bool ok;
#ifdef LOSSY
  bool fo;
#endif
#ifdef SCEN_JOBS
#ifdef LOSSY
  enqueue(2, 0);   /* a client's enqueue, acknowledged: a failover may lose it */
#endif
  cancel(2);
#endif
#if defined(SCEN_BATCH) || defined(SCEN_UNSERVED)
  batch_open(0, 0, ok);
  batch_add(1, ok); rbatch[1] = 1; enqueue(1, 0);
  batch_add(2, ok); rbatch[2] = 1; enqueue(2, 0);
  batch_seal(0);
#endif
#ifdef SCEN_UNSERVED
  cancel(2);
#endif
#ifdef SCEN_DEPS
  dep_wait();
  if :: crashes < MAX_CRASH -> crashes++; goto cgone :: true -> skip fi;
  dep_watch(e);
  if :: crashes < MAX_CRASH -> crashes++; goto cgone :: true -> skip fi;
  dep_apply(e, 1);
  if :: cancel(JC) :: skip fi;
#endif
cgone:
  skip
}

init {
  atomic {
#ifdef SCEN_JOBS
    enq[1] = 1; inq[1] = 1; rec[1] = R_QUEUED;
#ifndef LOSSY
    enq[2] = 1; inq[2] = 1; rec[2] = R_QUEUED;
#endif
#endif
#ifdef SCEN_GROUPS
    enq[1] = 1; inq[1] = 1; rec[1] = R_QUEUED;
    enq[2] = 1; inq[2] = 1; rec[2] = R_QUEUED;
    enq[3] = 1; inq[3] = 1; rec[3] = R_QUEUED;
#endif
#ifdef SCEN_UNSERVED
    qof[2] = 1;
#endif
#ifdef SCEN_DEPS
    enq[JP] = 1; inq[JP] = 1; rec[JP] = R_QUEUED;
#endif
    marker[0] = 1; marker[1] = 1;
    run worker(0); run worker(1); run client()
  }
}
