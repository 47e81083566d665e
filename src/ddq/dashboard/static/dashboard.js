// The ddq dashboard: polls the read-only JSON API and redraws charts, tables and canvases in place.
"use strict";

// A browser's work is CPU time taken from training on the same machine, so the page asks little:
const POLL_MS = 3000;           // charts and tables, in one request
const SLOW_POLL_MS = 15000;     // first-layer images (the replayed episode is fetched only when a new one exists)
const POINTS = 500;             // points asked of each series; the API downsamples to this
const REPLAY_FPS = 5;
const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#be185d", "#4d7c0f",
                "#7c3aed", "#b45309", "#0f766e", "#6b7280"];

// Visible to tests and to anyone poking at the page from the console.
const ddq = window.ddq = { charts: {}, xAxis: "env_steps", polls: 0, lastError: null, replayVersion: null };

// ------------------------------------------------------------------ helpers
async function getJSON(path) {
  const response = await fetch(path, { cache: "no-store" });
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

function fmt(value, digits = 3) {
  if (value === null || value === undefined || Number.isNaN(value)) return "–";
  const abs = Math.abs(value);
  if (abs !== 0 && (abs < 1e-3 || abs >= 1e6)) return value.toExponential(digits - 1);
  if (Number.isInteger(value) || abs >= 1000) return Math.round(value).toLocaleString("en-US");
  return value.toPrecision(digits);
}

function fmtCompact(value) {  // axis ticks: 2k, 1.5M (long numbers run together on narrow charts)
  if (value === null || value === undefined) return "";
  const abs = Math.abs(value);
  if (abs >= 1e6) return `${+(value / 1e6).toPrecision(3)}M`;
  if (abs >= 1e3) return `${+(value / 1e3).toPrecision(3)}k`;
  return fmt(value, 2);
}

const tickLabels = (u, ticks) => ticks.map((t) => (t === null ? "" : fmt(t, 2)));  // log axes skip minor ticks

function lastValue(values) {
  for (let i = values.length - 1; i >= 0; i--) if (values[i] !== null && values[i] !== undefined) return values[i];
  return null;
}

// Legends show the value under the cursor, and the newest value when nothing is hovered.
const legendValue = (format) => (u, v, si, idx) => format(idx === null ? lastValue(u.data[si] || []) : v);

function fmtDuration(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  const s = Math.max(0, Math.round(seconds));
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = s % 60;
  return h ? `${h}h${String(m).padStart(2, "0")}m` : m ? `${m}m${String(r).padStart(2, "0")}s` : `${r}s`;
}

function el(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = text;
  if (className) node.className = className;
  return node;
}

function fillTable(tbody, rows) {  // rows: arrays of cells, a cell is text or {text, className, title}
  tbody.replaceChildren(...rows.map((cells) => {
    const tr = el("tr");
    for (const cell of cells) {
      const td = el("td", typeof cell === "object" ? cell.text : cell, typeof cell === "object" ? cell.className : "");
      if (typeof cell === "object" && cell.title) td.title = cell.title;
      tr.append(td);
    }
    return tr;
  }));
}

// Aligns series measured at different x values into uPlot's one-x-array form (gaps are null).
function align(tables) {
  const rows = [];
  tables.forEach((table, t) => table.x.forEach((x, i) => { if (x !== null) rows.push([x, t, i]); }));
  rows.sort((a, b) => a[0] - b[0]);
  const offsets = [];
  let width = 0;
  for (const table of tables) { offsets.push(width); width += table.ys.length; }
  const data = [rows.map((row) => row[0])];
  for (let k = 0; k < width; k++) data.push(new Array(rows.length).fill(null));
  rows.forEach(([, t, i], j) => tables[t].ys.forEach((ys, k) => { data[1 + offsets[t] + k][j] = ys[i]; }));
  return data;
}

const positive = (values) => values.map((v) => (v !== null && v > 0 ? v : null));  // log scales

// ------------------------------------------------------------------ charts
function xAxisLabel() { return ddq.xAxis === "env_steps" ? "env steps" : "wall time"; }

function makeChart(name, series, { scales = {}, axes = [], bands, xTime = true, height = 220 } = {}) {
  const target = document.getElementById(`chart-${name}`);
  const xValues = xTime ? (u, ticks) => ticks.map((t) => (ddq.xAxis === "wall_time_s" ? fmtDuration(t) : fmtCompact(t)))
                        : undefined;
  const xValue = (v) => (v === null ? "–" : xTime && ddq.xAxis === "wall_time_s" ? fmtDuration(v) : fmt(v));
  const opts = {
    width: Math.max(target.clientWidth, 200), height,
    scales: { x: { time: false }, ...scales },
    series: [{ label: xTime ? xAxisLabel() : "staleness", value: legendValue(xValue) },
             ...series.map((s, i) => ({ stroke: COLORS[i % COLORS.length], width: 1.5, spanGaps: true,
                                        points: { show: false }, value: legendValue(fmt), ...s }))],
    axes: [{ values: xValues, size: 36, space: 60 }, { size: 56, values: tickLabels }, ...axes],
    legend: { live: true },
  };
  if (bands) opts.bands = bands;
  const empty = [[], ...series.map(() => [])];
  const chart = new uPlot(opts, empty, target);
  new ResizeObserver(() => chart.setSize({ width: Math.max(target.clientWidth, 200), height })).observe(target);
  ddq.charts[name] = chart;
  return chart;
}

function rightAxis(scale, label) {
  return { scale, side: 1, size: 52, grid: { show: false }, label, values: tickLabels };
}

// The returns, and the greedy count of rewarded steps where the env's score is that count (its name and
// unit from the run's env spec): made once the run's score is known.
function returnsChart(score) {
  const existing = ddq.charts.returns;
  if (existing && existing.scoreName === score.name) return existing;
  if (existing) existing.destroy();
  document.getElementById("chart-returns").replaceChildren();
  const chart = makeChart("returns", [
    { label: "episode return (bucket mean)" },
    { label: "max", stroke: "rgba(37,99,235,0.25)", width: 1 },
    { label: "min", stroke: "rgba(37,99,235,0.25)", width: 1 },
    { label: "greedy evaluation", stroke: COLORS[1], width: 2, points: { show: true, size: 6 } },
    { label: `greedy ${score.name} ${score.unit}`, scale: "score", stroke: COLORS[3], width: 2,
      points: { show: true, size: 6 } },
  ], { bands: [{ series: [2, 3], fill: "rgba(37,99,235,0.10)" }], height: 260,
       axes: [rightAxis("score", `${score.name} per greedy episode`)] });
  chart.scoreName = score.name;
  return chart;
}

function buildCharts() {
  makeChart("loss", [{ label: "loss" }], { scales: { y: { distr: 3, log: 10 } } });
  makeChart("q", [{ label: "mean max-Q" }, { label: "epsilon", scale: "eps", stroke: COLORS[2] }],
            { scales: { eps: { range: [0, 1] } }, axes: [rightAxis("eps", "epsilon")] });
  makeChart("throughput", [
    { label: "updates/s" }, { label: "pushes/s", stroke: COLORS[3] },
    { label: "env steps/s", scale: "steps", stroke: COLORS[2] },
  ], { axes: [rightAxis("steps", "env steps/s")] });
  makeChart("staleness", [{ label: "share of gradients", paths: uPlot.paths.bars({ size: [0.7, 60] }),
                            fill: "rgba(37,99,235,0.45)", spanGaps: false }],
            { xTime: false, scales: { x: { time: false, range: (u, min, max) => [min - 0.5, max + 0.5] } } });
}

function ratioChart(layers) {  // one series per layer, known only once data arrives
  const existing = ddq.charts.ratios;
  if (existing && existing.series.length === layers.length + 2) return existing;
  if (existing) existing.destroy();
  document.getElementById("chart-ratios").replaceChildren();
  return makeChart("ratios", [...layers.map((name) => ({ label: name })),
                              { label: "1e-3", stroke: "#9ca3af", dash: [4, 4], width: 1 }],
                   { scales: { y: { distr: 3, log: 10 } }, height: 240 });
}

// ------------------------------------------------------------------ panels
function showRun(run) {
  ddq.run = run;
  document.getElementById("run-name").textContent = `${run.run} · ${run.env} · ${run.mode}`;
  const badge = document.getElementById("run-state");
  badge.textContent = run.state || "unknown";
  badge.className = `badge ${run.state || ""}`;
  const now = run.finished || Date.now() / 1000;
  const counters = [["env steps", fmt(run.env_steps)], ["of", fmt(run.total_steps)], ["updates", fmt(run.updates)],
                    ["episodes", fmt(run.episodes)], ["evaluations", fmt(run.evaluations)],
                    ["workers", fmt(run.workers)],
                    ...(run.shards ? [["shards", fmt(run.shards)]] : []),  // none without a parameter server
                    ["elapsed", fmtDuration(run.started ? now - run.started : null)]];
  const restarts = Object.values(run.restarts || {}).reduce((sum, n) => sum + n, 0);
  if (restarts) counters.push(["process restarts", fmt(restarts)]);  // shards the driver restarted
  // how far the driver's evaluations run behind the weights they test: the run learns of its target that much
  // late (shown from a second on; in-line evaluations are never behind)
  if (run.evaluation_lag_s >= 1) counters.push(["evaluations behind by", fmtDuration(run.evaluation_lag_s)]);
  document.getElementById("counters").replaceChildren(...counters.map(([name, value]) => {
    const div = el("div");
    div.append(el("dt", name), el("dd", value));
    return div;
  }));
}

function showReturns(returns) {
  const x = ddq.xAxis, e = returns.episodes, v = returns.evaluations;
  const score = (ddq.run && ddq.run.score) || { name: "return", unit: "per episode", rewarded_steps: false };
  const counted = Boolean(score.rewarded_steps);  // the score counts rewarded steps, not the return
  const chart = returnsChart(score);
  if (chart.series[5].show !== counted) {
    chart.axes[2].show = counted;  // the count's axis only where the score is a count
    chart.setSeries(5, { show: counted });
  }
  chart.setData(align([
    { x: e[x], ys: [e.episode_return, e.episode_return_max, e.episode_return_min] },
    { x: v[x], ys: [v.mean_return, counted && v.mean_rewarded_steps ? v.mean_rewarded_steps : v.mean_return.map(() => null)] },
  ]));
}

function showProgress(progress) {
  const xs = progress[ddq.xAxis];
  ddq.charts.loss.setData([xs, positive(progress.loss)]);
  ddq.charts.q.setData([xs, progress.mean_max_q, progress.epsilon]);
  ddq.charts.throughput.setData([xs, progress.updates_per_s, progress.pushes_per_s, progress.env_steps_per_s]);
  const layers = Object.keys(progress.layer_ratios);
  if (layers.length) {
    ratioChart(layers).setData([xs, ...layers.map((name) => positive(progress.layer_ratios[name])),
                                xs.map(() => 1e-3)]);
  }
}

// actor-learner: the learner stands where the parameter server's shard would
function learnerRows(learner) {
  if (!learner) return [];
  return [
    [{ text: "learner: replay size", title: "transitions the learner can sample, over all actors' memories" },
     fmt(learner.replay_size)],
    [{ text: "env steps received", title: "transitions the actors' messages brought since the learner started" },
     fmt(learner.ingested)],
    [{ text: "updates per env step", title: "gradient updates per env step received: --replay-ratio, whatever " +
       "the number of actors (until --learning-starts steps arrived, none)" }, fmt(learner.updates_per_env_step)],
    [{ text: "weight publications", title: "times the learner published its weights (every --publish-every updates)" },
     fmt(learner.publications)],
    [{ text: "policy lag", title: "updates between the weights an actor acted with and the learner's when the " +
       "experience arrived (mean over the last messages)" }, fmt(learner.policy_lag)],
  ];
}

// data-parallel has no parameter server: its worker 0 reports the updates every worker applied, none stale
const AVERAGED_TITLE = ["Averaged gradients ", el("small", "no parameter server: every worker applies the mean " +
                                                  "of all gradients at once, so none is stale")];

function showServer(server) {
  const title = document.getElementById("server-title");
  if (server.role === "data-parallel" && !title.dataset.averaged) {
    title.replaceChildren(...AVERAGED_TITLE);
    title.dataset.averaged = "yes";
  }
  const staleness = Object.entries(server.staleness).map(([k, n]) => [Number(k), n]).sort((a, b) => a[0] - b[0]);
  const total = staleness.reduce((sum, [, n]) => sum + n, 0) || 1;
  // the axis ends where 99.9% of the gradients are; a long thin tail is said in the table instead
  let seen = 0;
  const shown = staleness.filter(([, n]) => { const inside = seen < 0.999 * total; seen += n; return inside; });
  const tail = staleness.slice(shown.length);
  ddq.charts.staleness.setData([shown.map(([k]) => k), shown.map(([, n]) => n / total)]);
  const reasons = Object.entries(server.rejected);
  const tailRow = tail.length ? [[{ text: "staler than the chart shows", title: "the last 0.1% of gradients" },
                                  `${fmt(tail.reduce((sum, [, n]) => sum + n, 0) / total)} of them, up to ` +
                                  `${tail[tail.length - 1][0]} updates behind`]] : [];
  fillTable(document.querySelector("#rejections tbody"), [
    ...tailRow,
    [{ text: "rejected messages", className: "", title: "messages a shard refused (malformed, wrong layout or run)" },
     fmt(server.rejected_total)],
    ...reasons.map(([reason, n]) => [`  ${reason}`, fmt(n)]),
    [{ text: "dropped as stale", title: "gradients older than --max-staleness, not applied" }, fmt(server.dropped_stale)],
    ...learnerRows(server.learner),
  ]);
  fillTable(document.querySelector("#layers tbody"), server.layers.map((layer) => {
    const ratio = layer.update_ratio;
    const far = ratio !== null && (ratio < 1e-4 || ratio > 1e-2);
    return [layer.name, fmt(layer.weight_norm), fmt(layer.grad_norm),
            { text: fmt(ratio), className: far ? "warn" : "",
              title: far ? "more than 10x away from 1e-3: the learning rate may be off for this layer" : "" }];
  }));
}

function showWorkers(workers, run) {
  const starting = run.state === "running" && workers.length === 0;
  document.getElementById("workers-note").textContent = starting
    ? `starting ${fmt(run.workers)}: Spark's JVM starts them (about 20 s)`
    : `${workers.filter((w) => w.state === "running").length} running of ${workers.length}`;
  const notice = document.getElementById("notice");
  notice.hidden = !starting;
  notice.textContent = starting ? `Starting: waiting for Spark to start ${fmt(run.workers)} workers (its JVM takes ` +
    "about 20 s). The charts fill once they report." : "";
  fillTable(document.querySelector("#workers tbody"), workers.map((w) => [
    `#${w.worker}`, { text: w.state, className: `state-${w.state}` }, fmt(w.env_steps), fmt(w.env_steps_per_s),
    w.collective_share === null || w.collective_share === undefined ? "–" : `${Math.round(100 * w.collective_share)}%`,
    fmt(w.pushes_per_s), fmt(w.backlog_waits), `${fmtDuration(w.heartbeat_age_s)} ago`, fmt(w.restarts), String(w.pid),
  ]));
}

function decodeBytes(base64) {
  const text = atob(base64);
  const bytes = new Uint8Array(text.length);
  for (let i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
  return bytes;
}

function showFirstLayer(layer) {
  const note = document.getElementById("filters-note");
  const canvas = document.getElementById("filters");
  if (!layer.available) { note.textContent = layer.reason; canvas.width = canvas.height = 1; return; }
  const { filters, channels, height, width } = layer;
  note.textContent = `${layer.layer}: ${filters} × ${channels} images of ${height}×${width}, version ${layer.version}`;
  const pixels = decodeBytes(layer.pixels);
  const tileW = channels * width + channels - 1, columns = Math.max(1, Math.floor(560 / ((tileW + 2) * 3)));
  const scale = Math.max(1, Math.min(8, Math.floor(48 / Math.max(height, width))));
  const rows = Math.ceil(filters / columns);
  canvas.width = columns * (tileW + 2) * scale;
  canvas.height = rows * (height + 2) * scale;
  const ctx = canvas.getContext("2d");
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, canvas.width, canvas.height);
  const image = ctx.createImageData(width, height);
  const scratch = document.createElement("canvas");
  scratch.width = width; scratch.height = height;
  for (let f = 0; f < filters; f++) {
    for (let c = 0; c < channels; c++) {
      const base = (f * channels + c) * height * width;
      for (let p = 0; p < height * width; p++) {
        const g = pixels[base + p];
        image.data.set([g, g, g, 255], 4 * p);
      }
      scratch.getContext("2d").putImageData(image, 0, 0);
      const x = ((f % columns) * (tileW + 2) + c * (width + 1)) * scale, y = Math.floor(f / columns) * (height + 2) * scale;
      ctx.imageSmoothingEnabled = false;
      ctx.drawImage(scratch, x, y, width * scale, height * scale);
    }
  }
}

// Each new episode plays through once, then holds its last frame (a click plays it again): every
// animated frame costs a browser without GPU compositing a repaint, taken from training's CPU.
const replay = { frames: null, side: 0, count: 0, index: 0, timer: null, palette: {}, colors: {},
                 onScreen: false, playing: false, scores: null, lengths: null };

function showReplay(episode) {
  const note = document.getElementById("replay-note");
  if (!episode) { note.textContent = "no evaluated episode yet (Celery evaluates snapshots)"; return; }
  if (episode.version === ddq.replayVersion) return;
  ddq.replayVersion = episode.version;
  Object.assign(replay, { frames: decodeBytes(episode.frames), side: episode.side, count: episode.count, index: 0,
                          palette: episode.palette || {}, colors: {}, playing: true,
                          scores: episode.scores || null, lengths: episode.lengths || null });
  note.textContent = `snapshot version ${episode.version}, greedy return ${fmt(episode.mean_return)} (mean), ` +
                     `${episode.count} frames; click to replay`;
  drawReplayFrame(true);
  if (!replay.timer) {
    const canvas = document.getElementById("replay");
    replay.timer = setInterval(drawReplayFrame, 1000 / REPLAY_FPS);
    new IntersectionObserver(([entry]) => { replay.onScreen = entry.isIntersecting; }).observe(canvas);
    canvas.addEventListener("click", () => { replay.index = 0; replay.playing = true; });
  }
}

// The board is drawn one canvas pixel per cell and scaled up by CSS (a 12x12 raster, not 320x320).
function drawReplayFrame(always = false) {
  const { frames, side, count } = replay;
  if (!frames || !count) return;
  if (!always && (!replay.playing || !replay.onScreen || document.visibilityState === "hidden")) return;
  const canvas = document.getElementById("replay");
  if (canvas.width !== side) {
    canvas.width = canvas.height = side;
    replay.image = canvas.getContext("2d").createImageData(side, side);
  }
  const pixels = replay.image.data, base = replay.index * side * side;
  for (let p = 0; p < side * side; p++) {
    const level = frames[base + p];
    pixels.set(replay.colors[level] || (replay.colors[level] = rgba(replay.palette[level], level)), 4 * p);
  }
  canvas.getContext("2d").putImageData(replay.image, 0, 0);
  showReplayCount(replay.index);
  if (replay.index < count - 1) replay.index += 1;
  else replay.playing = false;
}

// Under the board, frame by frame: the score so far by its name where it counts rewarded steps, and the
// length the env's info gives, where it gives one.
function showReplayCount(index) {
  const { scores, lengths } = replay;
  const score = (ddq.run && ddq.run.score) || { name: "return", rewarded_steps: false };
  const parts = [];
  if (scores && score.rewarded_steps) parts.push(`${score.name} ${scores[index]}`);
  if (lengths) parts.push(`length ${lengths[index]}`);
  document.getElementById("replay-count").textContent = parts.join(" · ");
}

function rgba(hex, level) {  // "#rrggbb" from the palette, else the gray level itself
  if (!hex) return [level, level, level, 255];
  const n = parseInt(hex.slice(1), 16);
  return [(n >> 16) & 255, (n >> 8) & 255, n & 255, 255];
}

// ------------------------------------------------------------------ polling
function setConnection(ok, text) {
  const node = document.getElementById("connection");
  node.textContent = text;
  node.className = ok ? "connection" : "connection lost";
}

let lastSeries = null;

async function poll() {
  if (document.visibilityState === "hidden") return;
  try {
    const { run, returns, progress, server, workers } = await getJSON(`api/live?points=${POINTS}`);  // one request
    lastSeries = { returns, progress };
    showRun(run);
    if (run.replay_version !== null && run.replay_version !== ddq.replayVersion) showReplay(await getJSON("api/replay"));
    else if (run.replay_version === null) showReplay(null);
    showReturns(returns);
    showProgress(progress);
    showServer(server);
    showWorkers(workers, run);
    ddq.polls += 1;
    setConnection(true, `updated ${new Date().toLocaleTimeString()}`);
  } catch (error) {
    ddq.lastError = String(error);
    setConnection(false, `cannot reach the dashboard's API (${error.message}); retrying`);
  }
}

async function pollSlow() {
  if (document.visibilityState === "hidden") return;
  try {
    showFirstLayer(await getJSON("api/first-layer"));
  } catch (error) {
    ddq.lastError = String(error);
  }
}

function start() {
  buildCharts();
  const choice = document.getElementById("x-axis");
  choice.addEventListener("change", () => {
    ddq.xAxis = choice.value;
    if (lastSeries) { showReturns(lastSeries.returns); showProgress(lastSeries.progress); }
  });
  poll();
  pollSlow();
  setInterval(poll, POLL_MS);
  setInterval(pollSlow, SLOW_POLL_MS);
  document.addEventListener("visibilitychange", () => { if (document.visibilityState === "visible") poll(); });
}

start();
