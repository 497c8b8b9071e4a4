// cogworker-async dashboard: the live throughput graph, "select all" checkboxes, and a
// confirm() before bulk actions. No inline script anywhere (the CSP forbids it).
"use strict";

const POLL_MS = 2000;   // how often the graph asks for the totals
const POINTS = 60;      // points kept: two minutes at one every 2 s

function startGraph(svg) {
  const src = svg.dataset.src;
  const lines = { processed: svg.querySelector(".processed"), failed: svg.querySelector(".failed") };
  const status = document.querySelector("[data-graph-status]");
  const scale = document.querySelector("[data-graph-scale]");
  const rates = { processed: [], failed: [] };
  let last = null;

  function draw() {
    const [width, height] = [600, 160];
    // The top is a round number above the highest rate shown, so that lines keep still
    // between polls and the scale reads at a glance.
    const peak = Math.max(1, ...rates.processed, ...rates.failed);
    const top = [1, 2, 5].map((m) => m * 10 ** Math.floor(Math.log10(peak)))
      .concat([10 ** Math.ceil(Math.log10(peak))]).find((v) => v >= peak);
    if (scale) scale.textContent = `top of the graph: ${top.toLocaleString()}/s`;
    for (const name of Object.keys(lines)) {
      const series = rates[name];
      const step = width / (POINTS - 1);
      const offset = (POINTS - series.length) * step;
      const points = series.map((v, i) =>
        `${(offset + i * step).toFixed(1)},${(height - 2 - (v / top) * (height - 4)).toFixed(1)}`);
      lines[name].setAttribute("points", points.join(" "));
    }
  }

  function show(name, value) {
    for (const el of document.querySelectorAll(`[data-rate="${name}"]`)) el.textContent = value.toFixed(1);
  }

  async function poll() {
    try {
      const response = await fetch(src, { headers: { accept: "application/json" }, cache: "no-store" });
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      const now = await response.json();
      for (const name of ["processed", "failed"]) {
        for (const el of document.querySelectorAll(`[data-total="${name}"]`)) el.textContent = now[name].toLocaleString();
      }
      if (last !== null && now.at > last.at) {
        const seconds = now.at - last.at;
        for (const name of ["processed", "failed"]) {
          // A counter reset (stats cleared) would be a negative rate: show 0 instead.
          const rate = Math.max(0, (now[name] - last[name]) / seconds);
          rates[name].push(rate);
          if (rates[name].length > POINTS) rates[name].shift();
          show(name, rate);
        }
        draw();
        if (status) status.textContent = `updated ${new Date().toLocaleTimeString()}`;
      }
      last = now;
    } catch (error) {
      if (status) status.textContent = `Cannot read the totals (${error.message}); retrying.`;
    }
  }

  poll();
  setInterval(poll, POLL_MS);
}

function wireSelectAll(box) {
  const form = box.closest("form");
  box.addEventListener("change", () => {
    for (const item of form.querySelectorAll('input[type="checkbox"][name="token"]')) item.checked = box.checked;
  });
}

function wireConfirm(form) {
  form.addEventListener("submit", (event) => {
    if (!window.confirm(form.dataset.confirm)) event.preventDefault();
  });
}

document.addEventListener("DOMContentLoaded", () => {
  const graph = document.getElementById("throughput");
  if (graph) startGraph(graph);
  document.querySelectorAll("input[data-select-all]").forEach(wireSelectAll);
  document.querySelectorAll("form[data-confirm]").forEach(wireConfirm);
});
