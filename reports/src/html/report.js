// lockcheck's HTML report: draws the timeline and the charts from the JSON
// that the Rust side embedded in #lockcheck-data. Nothing is fetched; the
// page works from file://. Only what is in view is drawn, and items closer
// than a pixel are merged into one SVG path per category, so the page stays
// usable on histories of 100k events.
(function () {
  "use strict";
  const body = document.body;

  function recordError(error) {
    const text = error && error.stack ? String(error.stack) : String(error);
    body.dataset.errors = body.dataset.errors ? body.dataset.errors + "\n" + text : text;
  }

  // ---- data ---------------------------------------------------------------
  const D = JSON.parse(document.getElementById("lockcheck-data").textContent);
  const E = D.events;
  const KEYS = D.keys, FS = D.functions, ERRS = D.errors;
  const TYPES = ["invoke", "ok", "fail", "info"];
  // Event fields: [index, time, process, type, f, key, value, error, extra?]
  const EV_INDEX = 0, EV_TIME = 1, EV_PROC = 2, EV_TYPE = 3, EV_F = 4, EV_KEY = 5, EV_VALUE = 6,
    EV_ERROR = 7, EV_EXTRA = 8;

  const historyStart = E.length ? D.start : 0;
  const historyEnd = E.length ? Math.max(D.end, D.start + 1) : 1e9;

  function positionOfIndex(index) {
    let lo = 0, hi = E.length - 1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      const at = E[mid][EV_INDEX];
      if (at === index) return mid;
      if (at < index) lo = mid + 1; else hi = mid - 1;
    }
    return -1;
  }

  // Lanes: one per logical client, its processes in the order they took over.
  const LANES = D.lanes;
  const procLane = new Map();
  LANES.forEach((procs, lane) => procs.forEach((p) => procLane.set(p, lane)));
  const firstTime = new Map();
  for (const e of E) {
    if (e[EV_PROC] !== null && !firstTime.has(e[EV_PROC])) firstTime.set(e[EV_PROC], e[EV_TIME]);
  }

  // Operations, in invoke order.
  const M = D.ops.length;
  const opInv = new Int32Array(M), opCompl = new Int32Array(M), opLane = new Int32Array(M);
  const opStart = new Float64Array(M), opEnd = new Float64Array(M);
  const opOutcome = new Uint8Array(M), opF = new Int32Array(M), opKey = new Int32Array(M);
  const evOp = new Int32Array(E.length).fill(-1);
  const laneOps = LANES.map(() => []);
  const OUTCOME_NAMES = ["ok", "fail", "info"];
  for (let i = 0; i < M; i++) {
    const inv = D.ops[i][0], compl = D.ops[i][1];
    const e = E[inv];
    opInv[i] = inv; opCompl[i] = compl;
    opStart[i] = e[EV_TIME];
    opEnd[i] = compl >= 0 ? E[compl][EV_TIME] : historyEnd;
    const type = compl >= 0 ? E[compl][EV_TYPE] : 3;
    opOutcome[i] = type === 1 ? 0 : type === 2 ? 1 : 2;
    opF[i] = e[EV_F]; opKey[i] = e[EV_KEY];
    const lane = procLane.has(e[EV_PROC]) ? procLane.get(e[EV_PROC]) : 0;
    opLane[i] = lane;
    if (laneOps[lane]) laneOps[lane].push(i);
    evOp[inv] = i;
    if (compl >= 0) evOp[compl] = i;
  }
  const fName = (f) => FS[f];
  const isLockF = (f) => f === "acquire" || f === "release" || f === "renew";

  // Lock keys: those some acquire names, coloured in first-seen order.
  const PALETTE = ["#4c6ef5", "#12b886", "#be4bdb", "#fab005", "#15aabf", "#82c91e", "#fd7e14",
    "#e64980", "#7950f2", "#228be6"];
  const lockKeys = [];
  const keyColorIndex = new Map();
  for (let i = 0; i < M; i++) {
    if (fName(opF[i]) === "acquire" && !keyColorIndex.has(opKey[i])) {
      keyColorIndex.set(opKey[i], lockKeys.length % PALETTE.length);
      lockKeys.push(opKey[i]);
    }
  }

  // Beliefs: [key, process, grant op, start, start index, end, end index,
  // end reason, lease held until, lease latest end].
  const BELIEFS = D.beliefs.map((b) => {
    const grant = b[2];
    const compl = D.ops[grant] ? D.ops[grant][1] : -1;
    const value = compl >= 0 ? E[compl][EV_VALUE] : null;
    const fence = value && typeof value === "object" && value.fence !== undefined ? value.fence : null;
    const invokeValue = D.ops[grant] ? E[D.ops[grant][0]][EV_VALUE] : null;
    return {
      key: b[0], proc: b[1], grant: grant, start: b[3], startIndex: b[4], end: b[5], endIndex: b[6],
      reason: b[7], heldUntil: b[8], latestEnd: b[9], fence: fence,
      ttl: invokeValue && typeof invokeValue === "object" ? invokeValue.ttl_ms : undefined,
      lane: procLane.has(b[1]) ? procLane.get(b[1]) : 0, row: 0,
    };
  });
  const laneBeliefs = LANES.map(() => []);
  for (const b of BELIEFS) if (laneBeliefs[b.lane]) laneBeliefs[b.lane].push(b);
  // Sub-rows so that a client's beliefs about several locks at once do not
  // hide each other (most lanes need one).
  const laneRows = laneBeliefs.map((list) => {
    list.sort((a, b) => a.start - b.start);
    const rowEnds = [];
    for (const b of list) {
      let row = rowEnds.findIndex((end) => end <= b.start);
      if (row < 0) { row = rowEnds.length; rowEnds.push(0); }
      rowEnds[row] = b.end;
      b.row = row;
    }
    return Math.max(1, rowEnds.length);
  });

  // Fault windows, stacked into rows where they overlap.
  const FAULT_COLORS = { pause: "#7048e8", clock: "#1c7ed6", kill: "#c2255c", delay: "#0ca678",
    loss: "#f59f00", partition: "#e8590c", skew: "#1098ad", failover: "#ae3ec9" };
  const faultColor = (fault) => FAULT_COLORS[fault] || "#868e96";
  const MAX_FAULT_ROWS = 6;
  const FAULTS = D.nemesis.map((w) => {
    const start = E[w[0]], stop = w[1] >= 0 ? E[w[1]] : null;
    const value = start[EV_VALUE] && typeof start[EV_VALUE] === "object" ? start[EV_VALUE] : {};
    const fault = typeof value.fault === "string" ? value.fault : fName(start[EV_F]);
    const targets = Array.isArray(value.targets) ? value.targets.join(", ") : "";
    return { startPos: w[0], stopPos: w[1], start: start[EV_TIME],
      end: stop ? stop[EV_TIME] : historyEnd, instant: w[0] === w[1], fault: fault,
      targets: targets, row: 0 };
  });
  let faultRowCount = 0;
  {
    const rowEnds = [];
    for (const w of FAULTS) {
      let row = rowEnds.findIndex((end) => end < w.start);
      if (row < 0) row = rowEnds.length < MAX_FAULT_ROWS ? rowEnds.length : MAX_FAULT_ROWS - 1;
      rowEnds[row] = Math.max(rowEnds[row] || 0, w.end);
      w.row = row;
    }
    faultRowCount = rowEnds.length;
  }

  // Violations, with a window for each (from its events when it has none).
  const VIOLATIONS = D.violations.map((entry, at) => {
    const v = entry.violation;
    let times = (v.events || []).map(positionOfIndex).filter((p) => p >= 0).map((p) => E[p][EV_TIME]);
    let start, end;
    if (v.window) { start = v.window.start_ns; end = v.window.end_ns; }
    else if (times.length) { start = Math.min.apply(null, times); end = Math.max.apply(null, times); }
    else { start = historyStart; end = historyEnd; }
    const lin = v.linearization || null;
    const blockedOp = lin ? opOfIndex(lin.blocked) : -1;
    if (blockedOp >= 0) end = Math.max(end, opEnd[blockedOp]);
    return { at: at, checker: entry.checker, key: entry.keyId, v: v, start: start, end: end,
      eventTimes: times, lin: lin, blockedOp: blockedOp,
      lanes: new Set((v.processes || []).filter((p) => procLane.has(p)).map((p) => procLane.get(p))) };
  });

  function opOfIndex(index) {
    const p = positionOfIndex(index);
    return p >= 0 ? evOp[p] : -1;
  }

  // ---- formatting ---------------------------------------------------------
  function fmtTime(ns) {
    const digits = ns % 1e6 === 0 ? 3 : 6;
    return (ns / 1e9).toFixed(digits) + " s";
  }
  function fmtDur(ns) {
    if (ns >= 1e9 || ns === 0) return (ns / 1e9).toFixed(3) + " s";
    if (ns >= 1e6) return (ns / 1e6).toFixed(1) + " ms";
    return (ns / 1e3).toFixed(1) + " µs";
  }
  function esc(text) {
    return String(text).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;",
      '"': "&quot;", "'": "&#39;" })[c]);
  }
  const json = (value) => JSON.stringify(value);
  const keyName = (k) => (k >= 0 ? KEYS[k] : "");
  function describeEvent(pos) {
    const e = E[pos];
    const who = e[EV_PROC] === null ? "nemesis" : "p" + e[EV_PROC];
    let text = "#" + e[EV_INDEX] + " t=" + fmtTime(e[EV_TIME]) + " " + who + " " + TYPES[e[EV_TYPE]] +
      " " + fName(e[EV_F]);
    if (e[EV_KEY] >= 0) text += " " + json(keyName(e[EV_KEY]));
    if (e[EV_VALUE] !== null) text += " " + json(e[EV_VALUE]);
    if (e[EV_ERROR] >= 0) text += " error " + ERRS[e[EV_ERROR]];
    return text;
  }

  // ---- view ---------------------------------------------------------------
  const fullPad = (historyEnd - historyStart) * 0.01;
  const fullStart = historyStart - fullPad, fullEnd = historyEnd + fullPad;
  const MIN_SPAN = 1000;
  let viewStart = fullStart, viewEnd = fullEnd;
  let keyFilter = -1, showLeases = true, showOps = true;
  let selected = -1;
  let pending = false;

  function setView(start, end) {
    let span = Math.max(MIN_SPAN, end - start);
    if (span >= fullEnd - fullStart) { start = fullStart; span = fullEnd - fullStart; }
    start = Math.min(Math.max(start, fullStart), fullEnd - span);
    viewStart = start; viewEnd = start + span;
    scheduleRender();
  }
  function scheduleRender() {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => {
      pending = false;
      try { renderAll(); } catch (error) { recordError(error); }
    });
  }

  // ---- drawing helpers ----------------------------------------------------
  // One path per category; rects closer than half a pixel on one row merge,
  // and marks closer than a pixel and a half are drawn once.
  class Paths {
    constructor(xMin, xMax) { this.cats = new Map(); this.xMin = xMin; this.xMax = xMax; }
    cat(name) {
      let c = this.cats.get(name);
      if (!c) { c = { d: [], last: new Map() }; this.cats.set(name, c); }
      return c;
    }
    rect(name, x0, x1, y, h) {
      if (x1 < this.xMin || x0 > this.xMax) return;
      x0 = Math.max(x0, this.xMin - 1); x1 = Math.min(x1, this.xMax + 1);
      if (x1 < x0 + 1) x1 = x0 + 1;
      const c = this.cat(name), key = y + ":" + h, last = c.last.get(key);
      if (last && x0 <= last[1] + 0.5) { if (x1 > last[1]) last[1] = x1; return; }
      if (last) c.d.push(rectPath(last[0], last[1], y, h));
      c.last.set(key, [x0, x1]);
    }
    mark(name, x, y, shape) {
      if (x < this.xMin - 4 || x > this.xMax + 4) return;
      const c = this.cat(name), key = "m" + y, last = c.last.get(key);
      if (last !== undefined && Math.abs(x - last) < 1.5) return;
      c.last.set(key, x);
      c.d.push(shapePath(shape, x, y));
    }
    emit(styles) {
      const out = [];
      for (const [name, c] of this.cats) {
        for (const [key, last] of c.last) {
          if (Array.isArray(last)) {
            const [y, h] = key.split(":").map(Number);
            c.d.push(rectPath(last[0], last[1], y, h));
          }
        }
        if (c.d.length) out.push("<path " + (styles[name] || styles[name.replace(/\d+$/, "")] || "") +
          ' d="' + c.d.join("") + '"/>');
      }
      return out.join("");
    }
  }
  function rectPath(x0, x1, y, h) {
    return "M" + x0.toFixed(1) + " " + y + "h" + (x1 - x0).toFixed(1) + "v" + h + "h" +
      (x0 - x1).toFixed(1) + "z";
  }
  function shapePath(shape, x, y) {
    const X = x.toFixed(1);
    switch (shape) {
      case "triangle": return "M" + X + " " + (y - 4) + "l4 7h-8z";
      case "cross": return "M" + (x - 3).toFixed(1) + " " + (y - 3) + "l6 6m0 -6l-6 6";
      case "diamond": return "M" + X + " " + (y - 4) + "l4 4l-4 4l-4 -4z";
      case "big-diamond": return "M" + X + " " + (y - 7) + "l7 7l-7 7l-7 -7z";
      case "square": return "M" + (x - 1.5).toFixed(1) + " " + (y - 1.5) + "h3v3h-3z";
      case "dot": return "M" + (x - 2).toFixed(1) + " " + (y - 2) + "h4v4h-4z";
      default: return "M" + X + " " + (y - 4) + "v8";
    }
  }
  function niceStep(rough) {
    const power = Math.pow(10, Math.floor(Math.log10(rough)));
    for (const m of [1, 2, 5, 10]) if (m * power >= rough) return m * power;
    return 10 * power;
  }
  function timeTicks(start, end, pixels) {
    const step = niceStep((end - start) / Math.max(2, pixels / 110));
    const digits = Math.min(9, Math.max(0, -Math.floor(Math.log10(step / 1e9) + 1e-9)));
    const ticks = [];
    for (let t = Math.ceil(start / step) * step; t <= end; t += step) {
      ticks.push([t, (t / 1e9).toFixed(digits) + " s"]);
    }
    return ticks;
  }

  // ---- timeline layout ----------------------------------------------------
  const GUTTER = 170, RIGHT = 14, AXIS_H = 22, FAULT_ROW_H = 15, VIOLATION_ROW_H = 14;
  const BELIEF_ROW_H = 18, OPS_ROW_H = 14, LANE_PAD = 5;
  const LABEL_BUDGET = 700;
  const layout = (() => {
    const faultTop = AXIS_H;
    const violationTop = faultTop + faultRowCount * FAULT_ROW_H + (faultRowCount ? 2 : 0);
    const lanesTop = violationTop + (VIOLATIONS.length ? VIOLATION_ROW_H + 4 : 0);
    const laneTop = [], laneHeight = [];
    let y = lanesTop;
    LANES.forEach((procs, lane) => {
      laneTop.push(y);
      const h = LANE_PAD * 2 + laneRows[lane] * BELIEF_ROW_H + OPS_ROW_H;
      laneHeight.push(h);
      y += h;
    });
    return { faultTop, violationTop, lanesTop, laneTop, laneHeight, lanesBottom: y, height: y + 8 };
  })();
  const opsRowY = (lane) => layout.laneTop[lane] + LANE_PAD + laneRows[lane] * BELIEF_ROW_H;
  const beliefRowY = (lane, row) => layout.laneTop[lane] + LANE_PAD + row * BELIEF_ROW_H;

  const TIMELINE_STYLES = {
    "belief": "", "belief-stale": 'fill="#e03131"',
    "lease-held": 'fill="#495057" fill-opacity="0.7"', "lease-maybe": 'fill="#adb5bd" fill-opacity="0.8"',
    "op-ok": 'fill="#8ce99a"', "op-fail": 'fill="#ffc9c9"', "op-info": 'fill="#ffc078"',
    "w-ok": 'fill="#2b8a3e"', "w-fail": 'fill="none" stroke="#c92a2a" stroke-width="2"',
    "w-info": 'fill="#fff" stroke="#e67700" stroke-width="1.5"',
    "r-ok": 'fill="#1971c2"', "r-fail": 'fill="#ff8787"', "r-info": 'fill="#ffa94d"',
    "successor": 'fill="none" stroke="#495057" stroke-dasharray="2 2"',
    "lin-prefix": 'fill="none" stroke="#2f9e44" stroke-width="1.5"',
    "lin-blocked": 'fill="none" stroke="#c92a2a" stroke-width="2.5"',
    "violation-event": 'fill="none" stroke="#c92a2a" stroke-width="2"',
    "violation-mark": 'fill="#fa5252" fill-opacity="0.75"',
    "violation-selected": 'fill="#c92a2a"',
  };
  PALETTE.forEach((color, i) => { TIMELINE_STYLES["belief-c" + i] = 'fill="' + color + '"'; });

  const timelineEl = document.getElementById("timeline");
  const chartsEl = document.getElementById("charts");
  const tooltip = document.getElementById("tooltip");
  let geometry = null; // what the last render drew, for hover and clicks

  function renderAll() {
    renderTimeline();
    renderCharts();
    const range = document.getElementById("view-range");
    range.textContent = "showing t=" + fmtTime(Math.round(Math.max(viewStart, 0))) + " to t=" +
      fmtTime(Math.round(viewEnd)) + " (" + fmtDur(Math.round(viewEnd - viewStart)) + ")";
  }

  function plotWidth() { return Math.max(640, timelineEl.clientWidth || 1200); }

  function renderTimeline() {
    const W = plotWidth(), plotW = W - GUTTER - RIGHT, span = viewEnd - viewStart;
    const X = (t) => GUTTER + (t - viewStart) * plotW / span;
    const xMax = W - RIGHT;
    const paths = new Paths(GUTTER, xMax);
    const under = [], over = [], labels = [];
    let budget = LABEL_BUDGET;
    const label = (x, y, text, cls) => {
      if (budget <= 0 || x < GUTTER || x > xMax) return;
      budget--;
      labels.push('<text x="' + x.toFixed(1) + '" y="' + y + '"' + (cls ? ' class="' + cls + '"' : "") +
        ">" + esc(text) + "</text>");
    };
    const H = layout.height, top = layout.faultTop, lanesTop = layout.lanesTop;

    // Lane stripes and the time grid.
    LANES.forEach((procs, lane) => {
      if (lane % 2 === 1) {
        under.push('<rect x="0" y="' + layout.laneTop[lane] + '" width="' + W + '" height="' +
          layout.laneHeight[lane] + '" fill="#f8f9fa"/>');
      }
    });
    const ticks = timeTicks(viewStart, viewEnd, plotW);
    for (const [t, text] of ticks) {
      if (X(t) < GUTTER + 16) continue;
      const x = X(t).toFixed(1);
      under.push('<line x1="' + x + '" x2="' + x + '" y1="' + (AXIS_H - 4) + '" y2="' + layout.lanesBottom +
        '" stroke="#e9ecef"/>');
      labels.push('<text x="' + x + '" y="12" text-anchor="middle" class="muted">' + esc(text) + "</text>");
    }

    drawFaults(under, labels, X, xMax, top, lanesTop);
    drawViolationRow(paths, X);
    drawSelectedViolation(under, over, paths, X, label);
    LANES.forEach((procs, lane) => drawLane(lane, paths, X, label, span / plotW));
    drawSuccessors(paths, X, label);

    const clip = '<clipPath id="plot-clip"><rect x="' + GUTTER + '" y="0" width="' + plotW + '" height="' +
      H + '"/></clipPath>';
    const gutter = ['<rect x="0" y="0" width="' + (GUTTER - 2) + '" height="' + H + '" fill="#fff" fill-opacity="0.92"/>'];
    gutterLabels(gutter);
    timelineEl.innerHTML = '<svg xmlns="http://www.w3.org/2000/svg" width="' + W + '" height="' + H +
      '" role="img" aria-label="timeline"><defs>' + clip + '</defs><g clip-path="url(#plot-clip)">' +
      under.join("") + paths.emit(TIMELINE_STYLES) + over.join("") + labels.join("") + "</g>" +
      gutter.join("") + '<rect id="drag" x="0" y="0" width="0" height="' + H +
      '" fill="#339af0" fill-opacity="0.15" visibility="hidden"/></svg>';
    geometry = { W, plotW, X, span, start: viewStart };
  }

  function drawFaults(under, labels, X, xMax, top, lanesTop) {
    for (const w of FAULTS) {
      if (w.end < viewStart || w.start > viewEnd) continue;
      const color = faultColor(w.fault);
      const x0 = Math.max(X(w.start), GUTTER - 1), x1 = Math.min(X(w.end), xMax + 1);
      const width = Math.max(1.5, x1 - x0);
      const y = top + w.row * FAULT_ROW_H;
      under.push('<rect x="' + x0.toFixed(1) + '" y="' + lanesTop + '" width="' + width.toFixed(1) +
        '" height="' + (layout.lanesBottom - lanesTop) + '" fill="' + color + '" fill-opacity="0.09"/>');
      under.push('<rect x="' + x0.toFixed(1) + '" y="' + (y + 1) + '" width="' + width.toFixed(1) +
        '" height="' + (FAULT_ROW_H - 3) + '" fill="' + color + '" fill-opacity="0.8" rx="2"/>');
      const text = w.fault + (w.targets ? " " + w.targets : "") + (w.stopPos < 0 ? " (never stopped)" : "");
      if (width > 30) {
        labels.push('<text x="' + (Math.max(x0, GUTTER) + 3).toFixed(1) + '" y="' + (y + FAULT_ROW_H - 4) +
          '" class="small" style="fill:#fff">' + esc(text.length * 5.5 > width ? text.slice(0, Math.max(3, Math.floor(width / 5.5) - 1)) + "…" : text) +
          "</text>");
      }
    }
  }

  function drawViolationRow(paths, X) {
    if (!VIOLATIONS.length) return;
    const y = layout.violationTop + 1;
    for (const v of VIOLATIONS) {
      if (v.end < viewStart || v.start > viewEnd) continue;
      const x0 = X(v.start), x1 = Math.max(X(v.end), x0 + 3);
      paths.rect(v.at === selected ? "violation-selected" : "violation-mark", x0, x1, y, VIOLATION_ROW_H - 3);
    }
  }

  function drawSelectedViolation(under, over, paths, X, label) {
    if (selected < 0) return;
    const v = VIOLATIONS[selected];
    const x0 = X(v.start), x1 = Math.max(X(v.end), x0 + 2);
    const top = layout.faultTop, bottom = layout.lanesBottom;
    under.push('<rect x="' + x0.toFixed(1) + '" y="' + top + '" width="' + (x1 - x0).toFixed(1) + '" height="' +
      (bottom - top) + '" fill="#fa5252" fill-opacity="0.13" stroke="#fa5252" stroke-opacity="0.6"/>');
    for (const lane of v.lanes) {
      over.push('<rect x="' + x0.toFixed(1) + '" y="' + (layout.laneTop[lane] + 1) + '" width="' +
        (x1 - x0).toFixed(1) + '" height="' + (layout.laneHeight[lane] - 2) +
        '" fill="none" stroke="#c92a2a" stroke-width="2"/>');
    }
    for (const index of v.v.events || []) {
      const pos = positionOfIndex(index);
      if (pos < 0) continue;
      const e = E[pos];
      if (e[EV_PROC] === null || !procLane.has(e[EV_PROC])) continue;
      const lane = procLane.get(e[EV_PROC]);
      const x = X(e[EV_TIME]), y = opsRowY(lane) + OPS_ROW_H / 2;
      paths.mark("violation-event", x, y, "big-diamond");
      label(x + 8, y - 6, "#" + index, "bad");
    }
    if (v.lin) drawLinearization(v, paths, X, label);
  }

  function drawLinearization(v, paths, X, label) {
    const prefix = v.lin.prefix;
    for (let i = 0; i < prefix.length; i++) {
      const op = opOfIndex(prefix[i]);
      if (op < 0 || opEnd[op] < viewStart || opStart[op] > viewEnd) continue;
      const y = opsRowY(opLane[op]) + 1;
      outline(paths, "lin-prefix", X(opStart[op]), X(opEnd[op]), y, OPS_ROW_H - 2);
      label(X(opStart[op]), y - 1, String(i + 1), "small");
    }
    const op = v.blockedOp;
    if (op >= 0) {
      const y = opsRowY(opLane[op]);
      outline(paths, "lin-blocked", X(opStart[op]), X(opEnd[op]), y, OPS_ROW_H);
      label(X(opStart[op]), y + OPS_ROW_H + 9, "cannot be placed", "bad");
    }
  }
  function outline(paths, name, x0, x1, y, h) {
    if (x1 < x0 + 2) x1 = x0 + 2;
    if (x1 < GUTTER || x0 > paths.xMax) return;
    paths.cat(name).d.push(rectPath(Math.max(x0, GUTTER - 2), Math.min(x1, paths.xMax + 2), y, h));
  }

  function keyShown(key) { return keyFilter < 0 || key === keyFilter; }

  function drawLane(lane, paths, X, label, nsPerPixel) {
    const rowLabelEnd = [];
    for (const b of laneBeliefs[lane]) {
      if (b.end < viewStart && (b.latestEnd === null || b.latestEnd < viewStart)) continue;
      if (b.start > viewEnd && opStart[b.grant] > viewEnd) continue;
      if (!keyShown(b.key)) continue;
      const y = beliefRowY(lane, b.row);
      const x0 = X(b.start), x1 = X(b.end);
      paths.rect("belief-c" + (keyColorIndex.get(b.key) || 0), x0, x1, y + 2, 9);
      if (b.latestEnd !== null && b.end > b.latestEnd) {
        paths.rect("belief-stale", X(Math.max(b.latestEnd, b.start)), x1, y + 2, 9);
      }
      if (showLeases && b.heldUntil !== null) {
        const leaseStart = X(opStart[b.grant]);
        paths.rect("lease-held", leaseStart, X(b.heldUntil), y + 12, 4);
        if (b.latestEnd > b.heldUntil) paths.rect("lease-maybe", X(b.heldUntil), X(b.latestEnd), y + 12, 4);
      }
      const text = (lockKeys.length > 1 ? keyName(b.key) + " " : "") + (b.fence !== null ? "#" + b.fence : "");
      const from = Math.max(x0, GUTTER) + 2;
      if (text && x1 - from > text.length * 6 + 2 && from > (rowLabelEnd[b.row] || 0)) {
        label(from, y + 10, text, "small");
        rowLabelEnd[b.row] = from + text.length * 6;
      }
    }
    if (!showOps) return;
    const y = opsRowY(lane);
    let labelEnd = 0;
    const opsInView = [];
    for (const op of laneOps[lane]) {
      if (opStart[op] > viewEnd || opEnd[op] < viewStart) continue;
      const f = fName(opF[op]);
      if (keyFilter >= 0 && isLockF(f) && opKey[op] !== keyFilter) continue;
      opsInView.push(op);
      paths.rect("op-" + OUTCOME_NAMES[opOutcome[op]], X(opStart[op]), X(opEnd[op]), y + 3, OPS_ROW_H - 6);
    }
    const sparse = opsInView.length * 40 < (geometry ? geometry.plotW : 1000);
    for (const op of opsInView) {
      const f = fName(opF[op]);
      if (f !== "write" && f !== "read") continue;
      const outcome = OUTCOME_NAMES[opOutcome[op]];
      const x = X(opCompl[op] >= 0 ? opEnd[op] : opStart[op]);
      const mid = y + OPS_ROW_H / 2;
      if (f === "write") {
        paths.mark("w-" + outcome, x, mid, outcome === "ok" ? "triangle" : outcome === "fail" ? "cross" : "diamond");
        const value = E[opInv[op]][EV_VALUE];
        if (sparse && value && typeof value === "object" && value.fence !== undefined && x > labelEnd) {
          label(x + 5, mid + 4, "#" + value.fence, "small");
          labelEnd = x + 5 + String(value.fence).length * 6 + 8;
        }
      } else {
        paths.mark("r-" + outcome, x, mid, "dot");
      }
    }
  }

  function drawSuccessors(paths, X, label) {
    LANES.forEach((procs, lane) => {
      for (let i = 1; i < procs.length; i++) {
        const t = firstTime.get(procs[i]);
        if (t === undefined || t < viewStart || t > viewEnd) continue;
        const x = X(t);
        paths.cat("successor").d.push("M" + x.toFixed(1) + " " + layout.laneTop[lane] + "v" + layout.laneHeight[lane]);
        label(x + 2, layout.laneTop[lane] + 9, "p" + procs[i], "small muted");
      }
    });
  }

  function laneTitle(procs) {
    if (procs.length === 1) return "process " + procs[0];
    const shown = procs.slice(0, 3).map((p) => "p" + p).join(" → ");
    return shown + (procs.length > 3 ? " … (" + procs.length + ")" : "");
  }

  // The processes of a lane that acted within the view: each from its first
  // event until its successor's first event.
  function inView(procs) {
    const shown = [];
    for (let i = 0; i < procs.length; i++) {
      const from = firstTime.get(procs[i]);
      const until = i + 1 < procs.length ? firstTime.get(procs[i + 1]) : historyEnd;
      if (from <= viewEnd && until >= viewStart) shown.push("p" + procs[i]);
    }
    if (!shown.length) return "";
    return "in view: " + shown.slice(0, 3).join(", ") + (shown.length > 3 ? " +" + (shown.length - 3) : "");
  }

  function gutterLabels(gutter) {
    const text = (x, y, content, cls) => gutter.push('<text x="' + x + '" y="' + y + '"' +
      (cls ? ' class="' + cls + '"' : "") + ">" + content + "</text>");
    if (faultRowCount) text(6, layout.faultTop + 11, "nemesis", "muted");
    if (VIOLATIONS.length) text(6, layout.violationTop + 11, "violations", "bad");
    const named = selected >= 0 ? VIOLATIONS[selected].lanes : new Set();
    LANES.forEach((procs, lane) => {
      const y = layout.laneTop[lane];
      gutter.push("<g><title>" + esc("processes of this client, in order: " + procs.join(", ")) + "</title>");
      text(6, y + 14, esc(laneTitle(procs)), named.has(lane) ? "bad" : "");
      if (procs.length > 1) text(6, y + 26, esc(inView(procs)), "small muted");
      gutter.push("</g>");
    });
  }

  // ---- hover, click, zoom -------------------------------------------------
  function pointer(event) {
    const svg = timelineEl.querySelector("svg");
    const box = svg.getBoundingClientRect();
    return { x: event.clientX - box.left, y: event.clientY - box.top };
  }
  const timeAt = (x) => viewStart + (x - GUTTER) * (viewEnd - viewStart) / geometry.plotW;

  function laneAt(y) {
    for (let lane = 0; lane < LANES.length; lane++) {
      if (y >= layout.laneTop[lane] && y < layout.laneTop[lane] + layout.laneHeight[lane]) return lane;
    }
    return -1;
  }

  function violationsAt(t, tolerance) {
    return VIOLATIONS.filter((v) => v.start <= t + tolerance && v.end >= t - tolerance);
  }

  // What is under the pointer: [text for the tooltip, selectable violation].
  function hitTest(x, y) {
    if (!geometry || x < GUTTER) return null;
    const t = timeAt(x), tolerance = 4 * (viewEnd - viewStart) / geometry.plotW;
    if (faultRowCount && y >= layout.faultTop && y < layout.faultTop + faultRowCount * FAULT_ROW_H) {
      const row = Math.floor((y - layout.faultTop) / FAULT_ROW_H);
      const hit = FAULTS.filter((w) => w.row === row && w.start <= t + tolerance && w.end >= t - tolerance);
      return hit.length ? [hit.slice(0, 3).map(describeFault).join("\n\n")] : null;
    }
    if (VIOLATIONS.length && y >= layout.violationTop && y < layout.violationTop + VIOLATION_ROW_H) {
      const hit = violationsAt(t, tolerance);
      if (!hit.length) return null;
      const text = hit.slice(0, 3).map((v) => v.checker + ": " + v.v.explanation).join("\n\n") +
        (hit.length > 3 ? "\n… and " + (hit.length - 3) + " more here" : "") + "\n(click to focus)";
      return [text, hit[0].at];
    }
    const lane = laneAt(y);
    if (lane < 0) return null;
    const opsY = opsRowY(lane);
    if (y >= opsY) {
      const op = opAt(lane, t, tolerance);
      return op >= 0 ? [describeOp(op)] : null;
    }
    const row = Math.floor((y - layout.laneTop[lane] - LANE_PAD) / BELIEF_ROW_H);
    const withLease = (b) => showLeases && b.latestEnd !== null;
    const hit = laneBeliefs[lane].find((b) => b.row === row && keyShown(b.key) &&
      (withLease(b) ? Math.min(b.start, opStart[b.grant]) : b.start) <= t + tolerance &&
      (withLease(b) ? Math.max(b.end, b.latestEnd) : b.end) >= t - tolerance);
    return hit ? [describeBelief(hit)] : null;
  }

  function opAt(lane, t, tolerance) {
    const list = laneOps[lane];
    let lo = 0, hi = list.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (opStart[list[mid]] <= t + tolerance) lo = mid + 1; else hi = mid;
    }
    let best = -1, bestDistance = Infinity;
    for (let i = lo - 1, seen = 0; i >= 0 && seen < 500; i--, seen++) {
      const op = list[i];
      if (opEnd[op] < t - tolerance) continue;
      if (keyFilter >= 0 && isLockF(fName(opF[op])) && opKey[op] !== keyFilter) continue;
      const distance = Math.abs((opStart[op] + opEnd[op]) / 2 - t);
      if (distance < bestDistance) { best = op; bestDistance = distance; }
    }
    return best;
  }

  function describeOp(op) {
    const inv = E[opInv[op]];
    const lines = ["p" + inv[EV_PROC] + " " + fName(inv[EV_F]) + " " + json(keyName(inv[EV_KEY])) + " → " +
      (opCompl[op] >= 0 ? TYPES[E[opCompl[op]][EV_TYPE]] : "never completed (counts as info)")];
    lines.push("invoke #" + inv[EV_INDEX] + " at t=" + fmtTime(inv[EV_TIME]) + "  value " + json(inv[EV_VALUE]));
    if (opCompl[op] >= 0) {
      const c = E[opCompl[op]];
      lines.push(TYPES[c[EV_TYPE]] + " #" + c[EV_INDEX] + " at t=" + fmtTime(c[EV_TIME]) + " (" +
        fmtDur(c[EV_TIME] - inv[EV_TIME]) + ")  value " + json(c[EV_VALUE]) +
        (c[EV_ERROR] >= 0 ? "  error " + ERRS[c[EV_ERROR]] : ""));
      if (c[EV_EXTRA]) lines.push("also: " + json(c[EV_EXTRA]));
    }
    if (inv[EV_EXTRA]) lines.push("also: " + json(inv[EV_EXTRA]));
    if (selected >= 0 && VIOLATIONS[selected].lin) {
      const at = VIOLATIONS[selected].lin.prefix.indexOf(inv[EV_INDEX]);
      if (at >= 0) lines.push("linearized as operation " + (at + 1) + " of the longest linearizable prefix");
      if (VIOLATIONS[selected].blockedOp === op) lines.push("cannot be placed after the prefix");
    }
    return lines.join("\n");
  }

  function describeBelief(b) {
    const ends = ["invoked release", "an operation of it ended in info", "the end of the history"];
    const lines = ["p" + b.proc + " believed it held " + json(keyName(b.key)) +
      (b.fence !== null ? " with token " + b.fence : "")];
    lines.push("from #" + b.startIndex + " t=" + fmtTime(b.start) + " (its acquire's ok) to " +
      (b.reason === 2 ? "" : "#" + b.endIndex + " ") + "t=" + fmtTime(b.end) + ": " + ends[b.reason] +
      " (" + fmtDur(b.end - b.start) + ")");
    if (b.heldUntil !== null) {
      lines.push("lease (ttl " + b.ttl + " ms, by the test clock): surely held until t=" + fmtTime(b.heldUntil) +
        ", at most until t=" + fmtTime(b.latestEnd));
      if (b.end > b.latestEnd) {
        lines.push("it still believed it held the lock " + fmtDur(b.end - b.latestEnd) +
          " after the lease's latest possible end");
      }
    } else {
      lines.push("the grant asked for no TTL: no lease drawn");
    }
    return lines.join("\n");
  }

  function describeFault(w) {
    const start = E[w.startPos];
    let text = "nemesis " + w.fault + (w.targets ? " on " + w.targets : "") + "\n";
    if (w.instant) text += "at #" + start[EV_INDEX] + " t=" + fmtTime(w.start);
    else {
      text += "from #" + start[EV_INDEX] + " t=" + fmtTime(w.start) + " to " +
        (w.stopPos >= 0 ? "#" + E[w.stopPos][EV_INDEX] + " t=" + fmtTime(w.end) + " (" + fmtDur(w.end - w.start) + ")"
          : "the end of the history (never stopped)");
    }
    return text + "\nvalue " + json(start[EV_VALUE]);
  }

  function showTooltip(text, event) {
    tooltip.textContent = text;
    tooltip.hidden = false;
    const width = tooltip.offsetWidth, height = tooltip.offsetHeight;
    let left = event.clientX + 14, top = event.clientY + 14;
    if (left + width > window.innerWidth - 4) left = Math.max(4, event.clientX - width - 14);
    if (top + height > window.innerHeight - 4) top = Math.max(4, event.clientY - height - 14);
    tooltip.style.left = left + "px"; tooltip.style.top = top + "px";
  }
  const hideTooltip = () => { tooltip.hidden = true; };

  let drag = null;
  function dragRect() { return timelineEl.querySelector("#drag"); }

  function onMove(event) {
    const p = pointer(event);
    if (drag) {
      drag.x1 = Math.min(Math.max(p.x, GUTTER), geometry.W - RIGHT);
      const rect = dragRect();
      if (rect) {
        rect.setAttribute("x", Math.min(drag.x0, drag.x1));
        rect.setAttribute("width", Math.abs(drag.x1 - drag.x0));
        rect.setAttribute("visibility", "visible");
      }
      hideTooltip();
      return;
    }
    const hit = hitTest(p.x, p.y);
    if (hit) showTooltip(hit[0], event); else hideTooltip();
  }
  function onDown(event) {
    if (event.button !== 0) return;
    const p = pointer(event);
    if (p.x < GUTTER) return;
    drag = { x0: p.x, x1: p.x, y: p.y };
    event.preventDefault();
  }
  function onUp(event) {
    if (!drag) return;
    const d = drag;
    drag = null;
    const rect = dragRect();
    if (rect) rect.setAttribute("visibility", "hidden");
    if (Math.abs(d.x1 - d.x0) > 5) {
      const a = timeAt(Math.min(d.x0, d.x1)), b = timeAt(Math.max(d.x0, d.x1));
      setView(a, b);
      return;
    }
    const hit = hitTest(d.x0, d.y);
    if (hit && hit.length > 1) select(hit[1], true);
    void event;
  }
  function onWheel(event) {
    if (!geometry) return;
    event.preventDefault();
    const p = pointer(event);
    const span = viewEnd - viewStart;
    if (event.shiftKey || Math.abs(event.deltaX) > Math.abs(event.deltaY)) {
      const delta = (event.shiftKey ? event.deltaY : event.deltaX) || event.deltaY;
      setView(viewStart + delta * span / geometry.plotW, viewEnd + delta * span / geometry.plotW);
      return;
    }
    const factor = Math.exp(Math.max(-1, Math.min(1, event.deltaY * 0.0025)));
    const t = p.x >= GUTTER ? timeAt(p.x) : (viewStart + viewEnd) / 2;
    setView(t - (t - viewStart) * factor, t + (viewEnd - t) * factor);
  }
  function zoomButton(action) {
    const span = viewEnd - viewStart, middle = (viewStart + viewEnd) / 2;
    if (action === "in") setView(middle - span / 4, middle + span / 4);
    else if (action === "out") setView(middle - span, middle + span);
    else if (action === "left") setView(viewStart - span * 0.4, viewEnd - span * 0.4);
    else if (action === "right") setView(viewStart + span * 0.4, viewEnd + span * 0.4);
    else setView(fullStart, fullEnd);
  }

  // ---- selecting a violation ----------------------------------------------
  function select(at, zoom) {
    selected = at;
    document.querySelectorAll("li.violation").forEach((li) => {
      li.classList.toggle("selected", Number(li.dataset.violation) === at);
    });
    const v = VIOLATIONS[at];
    if (!v) return;
    if (zoom) {
      try { history.replaceState(null, "", "#v=" + at); } catch (error) { /* a sandboxed page */ }
    }
    renderSelection(v);
    if (zoom) zoomTo(v);
    scheduleRender();
  }

  function zoomTo(v) {
    let start = v.start, end = v.end;
    for (const t of v.eventTimes) { start = Math.min(start, t); end = Math.max(end, t); }
    const margin = Math.max((end - start) * 0.15, 1e6);
    setView(start - margin, end + margin);
  }

  function renderSelection(v) {
    const panel = document.getElementById("selection");
    panel.hidden = false;
    panel.textContent = "";
    const h = document.createElement("h3");
    h.textContent = v.checker + ": " + v.v.kind + " on " + json(v.v.key) + "  (t=" + fmtTime(Math.round(v.start)) +
      " to t=" + fmtTime(Math.round(v.end)) + ")";
    panel.appendChild(h);
    const p = document.createElement("p");
    p.textContent = v.v.explanation;
    panel.appendChild(p);
    const events = document.createElement("ul");
    for (const index of v.v.events || []) {
      const pos = positionOfIndex(index);
      const li = document.createElement("li");
      li.textContent = pos >= 0 ? describeEvent(pos) : "#" + index + " (not in this history)";
      events.appendChild(li);
    }
    panel.appendChild(events);
    if (v.lin) renderEvidence(panel, v);
    const button = document.createElement("button");
    button.type = "button";
    button.textContent = "zoom to this violation";
    button.addEventListener("click", () => zoomTo(v));
    panel.appendChild(button);
  }

  function renderEvidence(panel, v) {
    const lin = v.lin;
    const h = document.createElement("h3");
    h.textContent = "Linearizability evidence (model " + lin.model + ")";
    panel.appendChild(h);
    const p = document.createElement("p");
    p.textContent = "The longest linearizable prefix has " + lin.prefix.length +
      " operations (outlined in green on the timeline, numbered in linearization order). After it, the " +
      "operation outlined in red cannot take effect in any model state possible there: " +
      (lin.states.length ? lin.states.join("; ") : "(no state recorded)") + ".";
    panel.appendChild(p);
    const list = document.createElement("ol");
    const first = Math.max(0, lin.prefix.length - 200);
    list.start = first + 1;
    for (let i = first; i < lin.prefix.length; i++) {
      const li = document.createElement("li");
      const pos = positionOfIndex(lin.prefix[i]);
      li.textContent = pos >= 0 ? describeOpAt(pos) : "#" + lin.prefix[i];
      list.appendChild(li);
    }
    const blocked = document.createElement("li");
    blocked.className = "blocked";
    const pos = positionOfIndex(lin.blocked);
    blocked.textContent = "cannot be placed: " + (pos >= 0 ? describeOpAt(pos) : "#" + lin.blocked);
    list.appendChild(blocked);
    if (first > 0) {
      const note = document.createElement("p");
      note.className = "muted";
      note.textContent = "(the first " + first + " operations of the prefix are not listed)";
      panel.appendChild(note);
    }
    panel.appendChild(list);
    if (v.blockedOp >= 0) {
      const button = document.createElement("button");
      button.type = "button";
      button.textContent = "zoom to the end of the prefix";
      button.addEventListener("click", () => {
        const tail = lin.prefix.slice(-5).map(opOfIndex).filter((op) => op >= 0);
        let start = opStart[v.blockedOp], end = opEnd[v.blockedOp];
        for (const op of tail) { start = Math.min(start, opStart[op]); end = Math.max(end, opEnd[op]); }
        const margin = Math.max((end - start) * 0.1, 1e6);
        setView(start - margin, end + margin);
      });
      panel.appendChild(button);
    }
  }

  function describeOpAt(pos) {
    const op = evOp[pos];
    if (op < 0) return describeEvent(pos);
    const inv = E[opInv[op]];
    const value = (v) => (v === null ? "" : " " + json(v));
    let text = "#" + inv[EV_INDEX] + " p" + inv[EV_PROC] + " " + fName(inv[EV_F]) + " " +
      json(keyName(inv[EV_KEY])) + value(inv[EV_VALUE]);
    if (opCompl[op] >= 0) {
      const c = E[opCompl[op]];
      text += " → " + TYPES[c[EV_TYPE]] + value(c[EV_VALUE]) + (c[EV_ERROR] >= 0 ? " " + ERRS[c[EV_ERROR]] : "") +
        " (t=" + fmtTime(inv[EV_TIME]) + " to " + fmtTime(c[EV_TIME]) + ")";
    } else {
      text += " → never completed (t=" + fmtTime(inv[EV_TIME]) + ")";
    }
    return text;
  }

  // ---- charts -------------------------------------------------------------
  const CHART_F_ORDER = ["acquire", "release", "renew", "write", "read"];
  const chartFs = (() => {
    const present = new Set();
    for (let i = 0; i < M; i++) present.add(fName(opF[i]));
    const ordered = CHART_F_ORDER.filter((f) => present.has(f));
    for (const f of Array.from(present).sort()) if (!ordered.includes(f)) ordered.push(f);
    return ordered;
  })();
  const LATENCY_H = 96, RATE_H = 56, CHART_GAP = 18;
  const OUTCOME_COLORS = ["#2f9e44", "#e03131", "#f08c00"];

  function firstOpFrom(t) {
    let lo = 0, hi = M;
    while (lo < hi) { const mid = (lo + hi) >> 1; if (opStart[mid] < t) lo = mid + 1; else hi = mid; }
    return lo;
  }

  function renderCharts() {
    if (!chartFs.length) { chartsEl.textContent = "No client operations."; return; }
    const W = plotWidth(), plotW = W - GUTTER - RIGHT, span = viewEnd - viewStart;
    const X = (t) => GUTTER + (t - viewStart) * plotW / span;
    const byF = new Map(chartFs.map((f) => [f, []]));
    for (let op = firstOpFrom(viewStart); op < M && opStart[op] <= viewEnd; op++) byF.get(fName(opF[op])).push(op);
    const parts = [];
    let y = 8;
    for (const f of chartFs) {
      parts.push(chartPanel(f, byF.get(f), X, W, plotW, y));
      y += LATENCY_H + RATE_H + CHART_GAP + 10;
    }
    const ticks = timeTicks(viewStart, viewEnd, plotW).map(([t, text]) => '<text x="' + X(t).toFixed(1) + '" y="' +
      (y + 2) + '" text-anchor="middle" class="muted">' + esc(text) + "</text>").join("");
    chartsEl.innerHTML = '<svg xmlns="http://www.w3.org/2000/svg" width="' + W + '" height="' + (y + 10) +
      '" role="img" aria-label="latency and throughput"><defs><clipPath id="chart-clip"><rect x="' + GUTTER +
      '" y="0" width="' + plotW + '" height="' + (y + 10) + '"/></clipPath></defs>' + parts.join("") + ticks + "</svg>";
  }

  function faultShading(X, top, height) {
    const out = [];
    for (const w of FAULTS) {
      if (w.end < viewStart || w.start > viewEnd) continue;
      const x0 = X(w.start), x1 = Math.max(X(w.end), x0 + 1.5);
      out.push('<rect x="' + x0.toFixed(1) + '" y="' + top + '" width="' + (x1 - x0).toFixed(1) + '" height="' +
        height + '" fill="' + faultColor(w.fault) + '" fill-opacity="0.12"/>');
    }
    return out.join("");
  }

  function chartPanel(f, ops, X, W, plotW, top) {
    const out = [];
    const rateTop = top + LATENCY_H + 10;
    out.push('<text x="6" y="' + (top + 12) + '" style="font-weight:600">' + esc(f) + "</text>");
    out.push('<text x="6" y="' + (top + 26) + '" class="small muted">latency (log)</text>');
    out.push('<text x="6" y="' + (rateTop + 12) + '" class="small muted">invoked per second</text>');
    out.push('<text x="6" y="' + (rateTop + 24) + '" class="small muted">by outcome</text>');
    out.push('<g clip-path="url(#chart-clip)">' + faultShading(X, top, LATENCY_H) + faultShading(X, rateTop, RATE_H));
    out.push('<rect x="' + GUTTER + '" y="' + top + '" width="' + plotW + '" height="' + LATENCY_H +
      '" fill="none" stroke="#dee2e6"/><rect x="' + GUTTER + '" y="' + rateTop + '" width="' + plotW + '" height="' +
      RATE_H + '" fill="none" stroke="#dee2e6"/>');
    out.push(latencyChart(ops, X, plotW, top));
    out.push(rateChart(ops, X, plotW, rateTop));
    out.push("</g>");
    return out.join("");
  }

  function latencyChart(ops, X, plotW, top) {
    const completed = ops.filter((op) => opCompl[op] >= 0);
    if (!completed.length) {
      return '<text x="' + (GUTTER + 8) + '" y="' + (top + 20) + '" class="muted">no completed operations in view</text>';
    }
    let lo = Infinity, hi = 0;
    for (const op of completed) {
      const latency = Math.max(1e3, opEnd[op] - opStart[op]);
      if (latency < lo) lo = latency;
      if (latency > hi) hi = latency;
    }
    let logLo = Math.floor(Math.log10(lo)), logHi = Math.ceil(Math.log10(hi));
    if (logHi <= logLo) logHi = logLo + 1;
    const Y = (ns) => top + LATENCY_H - 4 - (Math.log10(Math.max(1e3, ns)) - logLo) / (logHi - logLo) * (LATENCY_H - 8);
    const out = [];
    for (let power = logLo; power <= logHi; power++) {
      const y = Y(Math.pow(10, power)).toFixed(1);
      out.push('<line x1="' + GUTTER + '" x2="' + (GUTTER + plotW) + '" y1="' + y + '" y2="' + y + '" stroke="#f1f3f5"/>');
      out.push('<text x="' + (GUTTER + 3) + '" y="' + (Number(y) - 2) + '" class="small muted">' +
        esc(fmtDur(Math.pow(10, power))) + "</text>");
    }
    const paths = new Paths(GUTTER, GUTTER + plotW);
    if (completed.length <= 3000) {
      for (const op of completed) {
        paths.mark("o" + opOutcome[op], X(opStart[op]), Math.round(Y(opEnd[op] - opStart[op])), "square");
      }
      return out.join("") + paths.emit({ o0: 'fill="#2f9e44"', o1: 'fill="#e03131"', o2: 'fill="#f08c00"' });
    }
    const buckets = Math.max(10, Math.floor(plotW / 6));
    const lists = Array.from({ length: buckets }, () => []);
    const span = viewEnd - viewStart;
    for (const op of completed) {
      const b = Math.min(buckets - 1, Math.max(0, Math.floor((opStart[op] - viewStart) / span * buckets)));
      lists[b].push(opEnd[op] - opStart[op]);
    }
    const width = plotW / buckets;
    const band = [], median = [], max = [];
    lists.forEach((list, b) => {
      if (!list.length) return;
      list.sort((a, c) => a - c);
      const q = (p) => list[Math.min(list.length - 1, Math.floor(p * list.length))];
      const x = GUTTER + b * width;
      const y5 = Y(q(0.05)), y95 = Y(q(0.95));
      band.push(rectPath(x, x + width, Math.min(y5, y95), Math.max(1, Math.abs(y5 - y95))));
      median.push("M" + x.toFixed(1) + " " + Y(q(0.5)).toFixed(1) + "h" + width.toFixed(1));
      max.push(shapePath("square", x + width / 2, Y(list[list.length - 1])));
    });
    out.push('<path fill="#74c0fc" fill-opacity="0.5" d="' + band.join("") + '"/>');
    out.push('<path fill="none" stroke="#1864ab" stroke-width="1.5" d="' + median.join("") + '"/>');
    out.push('<path fill="#495057" d="' + max.join("") + '"/>');
    return out.join("");
  }

  function rateChart(ops, X, plotW, top) {
    const buckets = Math.max(10, Math.floor(plotW / 8));
    const span = viewEnd - viewStart;
    const counts = Array.from({ length: buckets }, () => [0, 0, 0]);
    for (const op of ops) {
      const b = Math.min(buckets - 1, Math.max(0, Math.floor((opStart[op] - viewStart) / span * buckets)));
      counts[b][opOutcome[op]]++;
    }
    const seconds = span / buckets / 1e9;
    let most = 0;
    for (const c of counts) most = Math.max(most, c[0] + c[1] + c[2]);
    if (!most) return "";
    const width = plotW / buckets, scale = (RATE_H - 4) / most;
    const d = [[], [], []];
    counts.forEach((c, b) => {
      let base = top + RATE_H;
      for (let outcome = 0; outcome < 3; outcome++) {
        if (!c[outcome]) continue;
        const h = c[outcome] * scale;
        d[outcome].push(rectPath(GUTTER + b * width, GUTTER + (b + 1) * width - 0.5, base - h, h));
        base -= h;
      }
    });
    const out = d.map((parts, outcome) => parts.length ? '<path fill="' + OUTCOME_COLORS[outcome] +
      '" fill-opacity="0.8" d="' + parts.join("") + '"/>' : "");
    out.push('<text x="' + (GUTTER + 3) + '" y="' + (top + 10) + '" class="small muted">' +
      esc((most / seconds).toPrecision(3) + "/s") + "</text>");
    return out.join("");
  }

  // ---- legend, controls, start ---------------------------------------------
  function legend() {
    const el = document.getElementById("legend");
    const item = (style, text) => '<span><span class="swatch" style="' + style + '"></span>' + esc(text) + "</span>";
    const items = [];
    lockKeys.slice(0, 10).forEach((k) => items.push(item("background:" + PALETTE[keyColorIndex.get(k)],
      "believed it held " + keyName(k) + " (#token)")));
    if (lockKeys.length > 10) items.push("<span>… " + (lockKeys.length - 10) + " more locks (colours repeat)</span>");
    if (BELIEFS.some((b) => b.heldUntil !== null)) {
      items.push(item("background:#e03131", "still believed after the lease's latest end"));
      items.push(item("background:#495057;height:4px", "lease surely held (invoke + ttl)"));
      items.push(item("background:#adb5bd;height:4px", "lease may have lasted (to ok + ttl)"));
    }
    items.push(item("background:#8ce99a", "op ok"), item("background:#ffc9c9", "op fail"),
      item("background:#ffc078", "op info"));
    items.push("<span>▲ write accepted · <span style=\"color:#c92a2a\">✕</span> write rejected · ◇ write unknown · ■ read</span>");
    const faults = Array.from(new Set(FAULTS.map((w) => w.fault)));
    faults.forEach((fault) => items.push(item("background:" + faultColor(fault) + ";opacity:.7", "fault: " + fault)));
    if (VIOLATIONS.length) items.push(item("background:#fa5252", "violation window"));
    if (VIOLATIONS.some((v) => v.lin)) {
      items.push(item("border:2px solid #2f9e44;background:none", "linearizable prefix"),
        item("border:2px solid #c92a2a;background:none", "cannot be placed"));
    }
    el.innerHTML = items.join("") + '<p class="muted hint">A belief runs from the acquire\'s ok to the ' +
      "client's release invoke, its first operation that ended in info, or the end of the history. " +
      "The lease bar assumes the server's clock runs at the test clock's rate: the server granted (or renewed) " +
      "between the request's invoke and its ok, so the lease lasted at least until invoke + ttl and at most " +
      "until ok + ttl; an ok release ends it. A process whose operation ended in info never acts again; the " +
      "client's next process continues in the same lane, marked with a dashed line.</p>";
  }

  function controls() {
    const filter = document.getElementById("key-filter");
    for (const k of lockKeys.slice(0, 500)) {
      const option = document.createElement("option");
      option.value = String(k);
      option.textContent = keyName(k);
      filter.appendChild(option);
    }
    filter.addEventListener("change", () => { keyFilter = Number(filter.value); scheduleRender(); });
    document.getElementById("show-leases").addEventListener("change", (event) => {
      showLeases = event.target.checked; scheduleRender();
    });
    document.getElementById("show-ops").addEventListener("change", (event) => {
      showOps = event.target.checked; scheduleRender();
    });
    document.querySelectorAll("[data-zoom]").forEach((button) => {
      button.addEventListener("click", () => zoomButton(button.dataset.zoom));
    });
    document.querySelectorAll("li.violation").forEach((li) => {
      const at = Number(li.dataset.violation);
      li.addEventListener("click", () => select(at, true));
      li.addEventListener("keydown", (event) => { if (event.key === "Enter") select(at, true); });
    });
    timelineEl.addEventListener("mousemove", onMove);
    timelineEl.addEventListener("mouseleave", () => { if (!drag) hideTooltip(); });
    timelineEl.addEventListener("mousedown", onDown);
    window.addEventListener("mouseup", onUp);
    timelineEl.addEventListener("wheel", onWheel, { passive: false });
    window.addEventListener("resize", scheduleRender);
    const copy = document.getElementById("copy-command");
    if (copy) {
      copy.addEventListener("click", () => {
        const text = document.getElementById("command").textContent;
        const selectText = () => {
          const range = document.createRange();
          range.selectNodeContents(document.getElementById("command"));
          const selection = window.getSelection();
          selection.removeAllRanges();
          selection.addRange(range);
        };
        if (navigator.clipboard) navigator.clipboard.writeText(text).catch(selectText); else selectText();
      });
    }
  }

  function start() {
    if (D.historyError) {
      const el = document.getElementById("history-error");
      el.hidden = false;
      el.textContent = "The lanes cannot be drawn: the history is not well formed (" + D.historyError +
        "). Faults and violations are shown.";
    }
    legend();
    controls();
    // The first violation is what the reader came for: show it at once, but
    // keep the whole history in view. A link can ask for another violation
    // (#v=3, zoomed to it) or a range of the test in seconds (#t=4.5,6.2).
    const asked = /^#v=(\d+)$/.exec(location.hash);
    const range = /^#t=([\d.]+),([\d.]+)$/.exec(location.hash);
    if (asked && Number(asked[1]) < VIOLATIONS.length) select(Number(asked[1]), true);
    else if (VIOLATIONS.length) select(0, false);
    if (range) setView(Number(range[1]) * 1e9, Number(range[2]) * 1e9);
    // The first render runs now, not on the next frame, so that a page that
    // is only loaded (a headless dump) has its drawing and its status.
    renderAll();
  }

  try {
    start();
    body.dataset.rendered = "ok";
  } catch (error) {
    recordError(error);
  }
})();
