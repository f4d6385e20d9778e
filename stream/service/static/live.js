// dpstream live page: polls this origin's /api (never another host) and draws SVG.
// What it shows is exactly what the release messages publish (docs/api.md).
"use strict";
(function () {
  const SVGNS = "http://www.w3.org/2000/svg"; // an XML namespace name, not a fetch
  const params = new URLSearchParams(window.location.search);
  const POLL_MS = Math.max(100, Number(params.get("poll")) || 1000);
  const SERIES_N = 200;     // latest points drawn in the time series (and kept in the page)
  const st = { domain: null, shape: [], labels: [], releases: [], next: null, sel: [0, 0], anchor: 0,
    modelMode: false, tables: [], cells: 0 };
  const MODEL_MECHANISMS = ["copula", "marginals"]; // model-release messages (docs/api.md)

  const $ = (id) => document.getElementById(id);
  function el(name, attrs, parent, text) {
    const e = document.createElementNS(SVGNS, name);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    if (parent) parent.appendChild(e);
    return e;
  }
  function hel(name, attrs, parent, text) { // an HTML element (el makes SVG ones)
    const e = document.createElement(name);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    if (parent) parent.appendChild(e);
    return e;
  }
  function frac(s) {
    if (s === null || s === undefined) return null;
    const [a, b] = String(s).split("/");
    return Number(a) / (b ? Number(b) : 1);
  }
  function fmt(x, digits) {
    if (x === null || x === undefined || !isFinite(x)) return "–";
    if (Number.isInteger(x)) return String(x);
    return Number(x.toPrecision(digits || 4)).toString();
  }
  function setConn(ok) {
    const c = $("conn");
    c.textContent = ok ? "live" : "reconnecting…";
    c.className = "conn " + (ok ? "live" : "down");
  }
  async function getJSON(url) {
    const resp = await fetch(url, { cache: "no-store" });
    if (!resp.ok) throw new Error(url + ": HTTP " + resp.status);
    return resp.json();
  }
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

  // -- the domain: what each bin means ---------------------------------------------------
  function attrLabels(a) {
    if (a.kind === "categorical") return a.values.slice();
    const out = [], w = (a.max - a.min) / a.bins;
    for (let i = 0; i < a.bins; i++) out.push(fmt(a.min + i * w, 3) + "–" + fmt(a.min + (i + 1) * w, 3));
    return out;
  }
  function coords(b) { // row-major: the last attribute varies fastest
    const c = new Array(st.shape.length);
    for (let d = st.shape.length - 1; d >= 0; d--) { c[d] = b % st.shape[d]; b = Math.floor(b / st.shape[d]); }
    return c;
  }
  function binLabel(b) {
    const attrs = st.domain.domain.attributes;
    if (st.modelMode) { // a cell of one of the released tables (their concatenation, in message order)
      const t = st.tables.find((t) => b >= t.offset && b < t.offset + t.size);
      if (!t) return "cell " + b;
      let i = b - t.offset;
      const c = new Array(t.shape.length);
      for (let d = t.shape.length - 1; d >= 0; d--) { c[d] = i % t.shape[d]; i = Math.floor(i / t.shape[d]); }
      return c.map((v, d) => t.attributes[d] + " " + st.labels[t.index[d]][v]).join(", ");
    }
    const c = coords(b);
    return c.map((v, d) => attrs[d].name + " " + st.labels[d][v]).join(", ");
  }
  function unit() { return st.modelMode ? "cell" : "bin"; }
  // a model release: its tables' counts, concatenated, play the part of a histogram's counts
  function adoptModel(r) {
    if (r.message_type !== "model-release") return r;
    const names = st.domain.domain.attributes.map((a) => a.name);
    if (!st.tables.length) {
      let offset = 0;
      st.tables = r.model.marginals.map((t) => {
        const size = t.shape.reduce((a, b) => a * b, 1);
        const out = { attributes: t.attributes, shape: t.shape, offset, size, index: t.attributes.map((a) => names.indexOf(a)) };
        offset += size;
        return out;
      });
      st.cells = offset;
      for (const id of ["sel-from", "sel-to"]) $(id).max = st.cells - 1;
    }
    r.counts = [].concat(...r.model.marginals.map((t) => t.counts));
    return r;
  }
  function setupDomain() {
    const d = st.domain;
    st.shape = d.domain.shape;
    st.labels = d.domain.attributes.map(attrLabels);
    $("stream").textContent = d.stream;
    const names = d.domain.attributes.map((a) => a.name).join(" × ");
    st.modelMode = MODEL_MECHANISMS.includes(((d.config || {}).release || {}).mechanism);
    $("chart-title").textContent = st.modelMode
      ? "Latest released marginals of " + names + " (a model release: no count per bin of the " + d.bins + ")"
      : "Latest counts by " + names + " (" + d.bins + " bins)";
    if (st.modelMode) for (const id of ["sel-from-label", "sel-to-label"]) $(id).firstChild.textContent = id.startsWith("sel-from") ? "from cell " : "to cell ";
    for (const id of ["sel-from", "sel-to"]) $(id).max = d.bins - 1;
    $("select-form").addEventListener("change", () => {
      const a = clampBin($("sel-from").value), b = clampBin($("sel-to").value);
      st.sel = [Math.min(a, b), Math.max(a, b)];
      render();
    });
    $("select-form").addEventListener("submit", (e) => e.preventDefault());
    // one listener on the chart's container, on the press: the chart is rebuilt at every release, and
    // a click whose press and release straddle a rebuild lands on no bar and was lost
    $("chart").addEventListener("pointerdown", (e) => {
      const hit = e.button === 0 && e.target.closest ? e.target.closest("[data-bin]") : null;
      if (hit) pick(Number(hit.getAttribute("data-bin")), e.shiftKey);
    });
    setupQuery(d);
  }
  // -- a box count from /api/query (the release's model or counts, computed by the service) --
  function setupQuery(d) {
    const box = $("query-ranges");
    box.textContent = "";
    d.domain.attributes.forEach((a, j) => {
      const labels = st.labels[j], label = hel("label", { class: "qrange" }, box, a.name + " ");
      for (const [end, init] of [["lo", 0], ["hi", labels.length - 1]]) {
        const s = hel("select", { id: "q-" + end + "-" + j, "data-attr": a.name }, label);
        labels.forEach((t, i) => { const o = hel("option", { value: String(i) }, s, t); if (i === init) o.selected = true; });
        if (end === "lo") hel("span", {}, label, " to ");
      }
    });
    $("query-form").addEventListener("submit", async (e) => {
      e.preventDefault();
      const where = d.domain.attributes.map((a, j) => {
        const lo = Number($("q-lo-" + j).value), hi = Number($("q-hi-" + j).value);
        const full = lo === 0 && hi === st.labels[j].length - 1;
        return full ? null : "where=" + encodeURIComponent(a.name + ":" + Math.min(lo, hi) + "-" + Math.max(lo, hi));
      }).filter((x) => x);
      if (!where.length) where.push("where=" + encodeURIComponent(d.domain.attributes[0].name + ":0-" + (st.labels[0].length - 1)));
      try {
        const resp = await fetch("api/query?" + where.join("&"));
        const body = await resp.json();
        if (!resp.ok) { $("query-answer").textContent = "–"; $("query-note").textContent = body.error; return; }
        $("query-answer").textContent = fmt(body.answer, 6);
        $("query-answer").dataset.answer = String(body.answer);
        $("query-note").textContent = "Timestep " + body.timestep + " (" + body.kind + "), from the " + body.computed_from +
          ": computed from the release message, no privacy cost.";
      } catch (err) {
        $("query-note").textContent = "the query failed: " + err;
      }
    });
  }
  function clampBin(v) {
    const n = st.modelMode ? Math.max(1, st.cells) : st.domain.bins;
    return Math.max(0, Math.min(n - 1, Math.floor(Number(v) || 0)));
  }
  function pick(b, extend) {
    if (extend) st.sel = [Math.min(st.anchor, b), Math.max(st.anchor, b)];
    else { st.sel = [b, b]; st.anchor = b; }
    render();
  }

  // -- accuracy -----------------------------------------------------------------------------
  function halfWidths(r) {
    const hw = r.accuracy.half_width, n = r.counts.length;
    if (Array.isArray(hw)) return hw;
    return new Array(n).fill(hw);
  }
  function isPlaceholder(r) { return r.accuracy.source_timestep === null; }

  // -- polling --------------------------------------------------------------------------------
  async function start() {
    while (!st.domain) {
      try { st.domain = await getJSON("api/domain"); } catch (e) { setConn(false); await sleep(POLL_MS); }
    }
    setupDomain();
    poll();
  }
  async function poll() {
    try {
      if (st.next === null) { // first load: only the history the series draws, not the whole retained feed
        const resp = await fetch("api/releases/latest", { cache: "no-store" });
        if (resp.ok) st.next = Math.max(0, (await resp.json()).timestep.index - SERIES_N + 1);
        else if (resp.status !== 404) throw new Error("api/releases/latest: HTTP " + resp.status);
      }
      const page = await getJSON("api/releases?from=" + (st.next === null ? 0 : st.next));
      setConn(true);
      ingest(page.releases);
      const r = page.retained;
      $("retained").textContent = r.count ? "The service keeps timesteps " + r.first + "–" + r.last +
        " (the latest " + r.capacity + " at most); older ones are on the output topic." : "";
    } catch (e) {
      setConn(false);
    }
    setTimeout(poll, POLL_MS);
  }
  function ingest(list) {
    if (!list.length) return;
    const byIndex = new Map(st.releases.map((r) => [r.timestep.index, r]));
    for (const r of list) byIndex.set(r.timestep.index, adoptModel(r)); // a re-sent release replaces its copy
    st.releases = Array.from(byIndex.values()).sort((a, b) => a.timestep.index - b.timestep.index).slice(-SERIES_N);
    st.next = st.releases[st.releases.length - 1].timestep.index + 1;
    render();
  }

  // -- drawing ----------------------------------------------------------------------------------
  function renderDeclared(r) { // the declared queries' answers the release carries (issue 33)
    const qs = r.queries || [];
    $("declared-panel").hidden = qs.length === 0;
    const body = $("declared-rows");
    body.textContent = "";
    for (const q of qs) {
      const row = hel("tr", { "data-query": q.name }, body);
      hel("td", {}, row, q.name);
      hel("td", { class: "declared-value" }, row, fmt(q.value, 6));
      hel("td", {}, row, q.half_width === null ? "no interval claimed" : "± " + fmt(q.half_width, 4));
      hel("td", {}, row, String(q.bins));
    }
    $("declared-note").dataset.timestep = String(r.timestep.index);
  }
  function render() {
    const latest = st.releases[st.releases.length - 1];
    if (!latest) return;
    renderCards(latest);
    renderDeclared(latest);
    if (st.modelMode) {
      renderMarginals(latest);
      renderCorrelation(latest);
      renderSeries();
      return;
    }
    const heat = st.shape.length === 2;
    if (heat) renderHeat(latest); else renderBars(latest);
    $("chart-note").textContent = "Counts are noisy: a count can be negative" + (heat ? " (orange cells)" : " (orange bars)") +
      (heat ? "; each count is ± the accuracy half-width." : ", and the whiskers show ± the accuracy half-width.") +
      " Click a " + (heat ? "cell" : "bar") + " to follow it below; shift-click another to follow the range between them (bins in row-major order).";
    renderSeries();
  }
  function renderCards(r) {
    $("timestep").textContent = "Timestep " + r.timestep.index;
    const day = (t) => t.slice(0, 10), clock = (t) => t.slice(11).replace("Z", "");
    $("period").textContent = day(r.timestep.start) + " " + clock(r.timestep.start) + " – " +
      (day(r.timestep.end) === day(r.timestep.start) ? "" : day(r.timestep.end) + " ") + clock(r.timestep.end) + " UTC";
    // release.delay: the stream publishes each timestep k timesteps late, smoothed with the later releases
    $("lag-note").textContent = r.lag ? "published " + r.lag.delay + " timestep" + (r.lag.delay === 1 ? "" : "s") +
      " late, smoothed with the releases through timestep " + r.lag.smoothed_through : "";
    const kind = $("kind");
    kind.textContent = r.kind;
    kind.className = "badge " + r.kind;
    const what = st.modelMode ? "model" : "counts";
    if (isPlaceholder(r)) $("kind-note").textContent = "no fresh release yet: an all-zero placeholder";
    else if (r.kind === "fresh") $("kind-note").textContent = "new noisy " + what + ", cost ε = " + fmt(r.accuracy.epsilon);
    else $("kind-note").textContent = "the " + what + " of timestep " + r.accuracy.source_timestep + " sent again (no ε spent)";
    const budget = frac(r.epsilon_budget_exact), cfg = st.domain.config || {};
    let used, note;
    if (r.method.unit === "w-event") {
      used = frac(r.window_epsilon_spent_exact);
      const w = cfg.privacy && cfg.privacy.w;
      $("budget").textContent = "ε " + fmt(used) + " of " + fmt(budget) + " used in this window";
      note = "remaining in the window of " + (w || "w") + " timesteps: " + fmt(budget - used) +
        " · ε spent since the start: " + fmt(r.epsilon_spent);
    } else {
      used = frac(r.epsilon_spent_exact);
      const cutoff = cfg.privacy && cfg.privacy.cutoff;
      $("budget").textContent = "ε " + fmt(used) + " of " + fmt(budget) + " used";
      note = "remaining: " + fmt(budget - used) + " · fresh releases: " + r.fresh_releases +
        (cutoff ? " of at most " + cutoff : "");
    }
    $("budget-note").textContent = note;
    $("budget-bar").style.width = Math.max(0, Math.min(100, 100 * used / budget)) + "%";
    const hw = halfWidths(r).filter((x) => x !== null);
    const per = st.modelMode ? " per marginal count at " : " per bin at ";
    if (!hw.length) $("accuracy").textContent = isPlaceholder(r) ? "no fresh release yet" : "no interval claimed (consistent tables)";
    else {
      const lo = Math.min(...hw), hi = Math.max(...hw), conf = Math.round(r.accuracy.confidence * 1000) / 10;
      $("accuracy").textContent = "± " + (lo === hi ? fmt(lo) : fmt(lo) + "–" + fmt(hi)) + per + conf + "%";
    }
    const estimator = r.model && r.model.correlation_estimator ? " (" + r.model.correlation_estimator + ")" : "";
    $("method").textContent = r.method.decision + " · " + r.method.mechanism + estimator + " · " + r.method.unit +
      " · " + r.fresh_releases + " fresh so far";
  }
  function extent(vals) {
    let lo = 0, hi = 1;
    for (const v of vals) if (v !== null && isFinite(v)) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
    return [lo, hi];
  }
  function ticks(lo, hi, n) {
    const raw = (hi - lo) / n, mag = Math.pow(10, Math.floor(Math.log10(raw || 1)));
    const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw) || raw;
    const out = [];
    for (let v = Math.ceil(lo / step) * step; v <= hi + 1e-9; v += step) out.push(Math.round(v / step) * step);
    return out;
  }
  function yAxis(svg, y, lo, hi, x0, x1) {
    for (const t of ticks(lo, hi, 4)) {
      el("line", { x1: x0, x2: x1, y1: y(t), y2: y(t), class: t === 0 ? "zero" : "axis" }, svg);
      el("text", { x: x0 - 6, y: y(t) + 4, "text-anchor": "end" }, svg, fmt(t));
    }
  }
  function renderBars(r) {
    const W = 900, H = 300, L = 50, R = 10, T = 12, B = 56, n = r.counts.length;
    const hw = halfWidths(r);
    const [lo, hi] = extent(r.counts.flatMap((c, i) => hw[i] === null ? [c] : [c - hw[i], c + hw[i]]));
    const y = (v) => T + (hi - v) / (hi - lo) * (H - T - B);
    const svg = el("svg", { viewBox: "0 0 " + W + " " + H, role: "img" });
    yAxis(svg, y, lo, hi, L, W - R);
    const bw = (W - L - R) / n, every = Math.ceil(n / 30);
    r.counts.forEach((c, i) => {
      const x = L + i * bw, sel = i >= st.sel[0] && i <= st.sel[1];
      const cls = "bar" + (c < 0 ? " neg" : "") + (r.kind === "republished" ? " republished" : "") + (sel ? " selected" : "");
      const bar = el("rect", { x: x + bw * 0.1, width: Math.max(1, bw * 0.8), y: Math.min(y(c), y(0)),
        height: Math.max(1, Math.abs(y(c) - y(0))), class: cls, "data-bin": i }, svg);
      el("title", {}, bar, binLabel(i) + ": " + fmt(c) + (hw[i] === null ? "" : " ± " + fmt(hw[i])));
      if (hw[i] !== null) {
        const cx = x + bw / 2;
        el("line", { x1: cx, x2: cx, y1: y(c - hw[i]), y2: y(c + hw[i]), class: "err" }, svg);
        el("line", { x1: cx - bw * 0.15, x2: cx + bw * 0.15, y1: y(c + hw[i]), y2: y(c + hw[i]), class: "err" }, svg);
        el("line", { x1: cx - bw * 0.15, x2: cx + bw * 0.15, y1: y(c - hw[i]), y2: y(c - hw[i]), class: "err" }, svg);
      }
      if (i % every === 0) {
        const lx = x + bw / 2, ly = H - B + 14;
        el("text", { x: lx, y: ly, "text-anchor": "end", transform: "rotate(-35 " + lx + " " + ly + ")" }, svg,
          st.shape.length === 1 ? st.labels[0][i] : String(i));
      }
    });
    $("chart").replaceChildren(svg);
  }
  function heatColour(v, lo, hi) {
    if (v < 0) { // negative counts: orange, darker the more negative
      const t = lo < 0 ? Math.min(1, v / lo) : 0;
      return "rgb(" + Math.round(255 - 61 * t) + "," + Math.round(237 - 172 * t) + "," + Math.round(213 - 201 * t) + ")";
    }
    const t = hi > 0 ? Math.min(1, v / hi) : 0;
    return "rgb(" + Math.round(247 - 216 * t) + "," + Math.round(251 - 140 * t) + "," + Math.round(255 - 20 * t) + ")";
  }
  function renderHeat(r) {
    // the attribute with more values runs along x
    const flip = st.shape[0] > st.shape[1], xs = flip ? 0 : 1, ys = flip ? 1 : 0;
    const nx = st.shape[xs], ny = st.shape[ys], attrs = st.domain.domain.attributes;
    const W = 900, L = 110, R = 10, T = 10, B = 60, cw = (W - L - R) / nx, ch = Math.min(40, Math.max(14, cw * 0.6));
    const H = T + ny * ch + B;
    const hw = halfWidths(r);
    const [lo, hi] = extent(r.counts);
    const svg = el("svg", { viewBox: "0 0 " + W + " " + H, role: "img" });
    for (let b = 0; b < r.counts.length; b++) {
      const c = coords(b), cx = c[xs], cy = c[ys], v = r.counts[b];
      const sel = b >= st.sel[0] && b <= st.sel[1];
      const cell = el("rect", { x: L + cx * cw, y: T + cy * ch, width: cw, height: ch, fill: heatColour(v, lo, hi),
        class: "cell" + (sel ? " selected" : ""), "data-bin": b }, svg);
      el("title", {}, cell, binLabel(b) + ": " + fmt(v) + (hw[b] === null ? "" : " ± " + fmt(hw[b])));
      if (r.counts.length <= 400) {
        el("text", { x: L + (cx + 0.5) * cw, y: T + (cy + 0.5) * ch + 4, "text-anchor": "middle", class: "cell-text" }, svg, fmt(v, 3));
      }
    }
    for (let j = 0; j < ny; j++) el("text", { x: L - 6, y: T + (j + 0.5) * ch + 4, "text-anchor": "end" }, svg, st.labels[ys][j]);
    const every = Math.ceil(nx / 20);
    for (let i = 0; i < nx; i += every) el("text", { x: L + (i + 0.5) * cw, y: T + ny * ch + 14, "text-anchor": "middle" }, svg, st.labels[xs][i]);
    el("text", { x: L + (W - L - R) / 2, y: H - 22, "text-anchor": "middle" }, svg, attrs[xs].name);
    el("text", { x: 12, y: T + ny * ch / 2, "text-anchor": "middle", transform: "rotate(-90 12 " + (T + ny * ch / 2) + ")" }, svg, attrs[ys].name);
    el("text", { x: W - R, y: H - 6, "text-anchor": "end" }, svg,
      "colour: " + fmt(lo) + " (orange: negative) … " + fmt(hi) + "; counts ± " + (hw[0] === null ? "–" : fmt(Math.max(...hw.filter((x) => x !== null)))));
    $("chart").replaceChildren(svg);
  }
  // -- model releases: one bar chart per released one-way table, the correlation as a heat map --
  function renderMarginals(r) {
    const hw = halfWidths(r), box = document.createElement("div");
    box.id = "marginals";
    box.className = "marginals";
    for (const t of st.tables) {
      if (t.shape.length !== 1) continue;
      const W = 420, H = 220, L = 46, R = 8, T = 22, B = 50, n = t.size;
      const vals = r.counts.slice(t.offset, t.offset + n), ws = hw.slice(t.offset, t.offset + n);
      const [lo, hi] = extent(vals.flatMap((c, i) => ws[i] === null ? [c] : [c - ws[i], c + ws[i]]));
      const y = (v) => T + (hi - v) / (hi - lo) * (H - T - B);
      const svg = el("svg", { viewBox: "0 0 " + W + " " + H, role: "img", "data-attr": t.attributes[0] });
      el("text", { x: L, y: 14, class: "mtitle" }, svg, t.attributes[0]);
      yAxis(svg, y, lo, hi, L, W - R);
      const bw = (W - L - R) / n, every = Math.ceil(n / 16);
      vals.forEach((c, i) => {
        const b = t.offset + i, x = L + i * bw, sel = b >= st.sel[0] && b <= st.sel[1];
        const cls = "bar mbar" + (c < 0 ? " neg" : "") + (r.kind === "republished" ? " republished" : "") + (sel ? " selected" : "");
        const bar = el("rect", { x: x + bw * 0.1, width: Math.max(1, bw * 0.8), y: Math.min(y(c), y(0)),
          height: Math.max(1, Math.abs(y(c) - y(0))), class: cls, "data-bin": b, "data-count": c }, svg);
        el("title", {}, bar, binLabel(b) + ": " + fmt(c) + (ws[i] === null ? "" : " ± " + fmt(ws[i])));
        if (ws[i] !== null) {
          const cx = x + bw / 2;
          el("line", { x1: cx, x2: cx, y1: y(c - ws[i]), y2: y(c + ws[i]), class: "err" }, svg);
        }
        if (i % every === 0) {
          const lx = x + bw / 2, ly = H - B + 14;
          el("text", { x: lx, y: ly, "text-anchor": "end", transform: "rotate(-35 " + lx + " " + ly + ")" }, svg,
            st.labels[t.index[0]][i]);
        }
      });
      const wrap = document.createElement("div");
      wrap.className = "mchart";
      wrap.appendChild(svg);
      box.appendChild(wrap);
    }
    $("chart").replaceChildren(box);
    const more = st.tables.filter((t) => t.shape.length > 1).length, m = r.model;
    $("chart-note").textContent = "One bar chart per attribute: its released one-way marginal (noisy counts" +
      (hw.some((x) => x !== null) ? ", whiskers ± the accuracy half-width" : "") + "). " +
      (more ? more + " released table(s) of 2 or more attributes are in the API and can be followed below (cells after the one-way tables). " : "") +
      "DP estimate of the records: " + fmt(m.total) + "." +
      (m.synthetic ? " Synthetic sample: " + m.synthetic.records.length + " records (in /api/releases)." : "") +
      " Click a bar to follow it below; shift-click another to follow the range between them.";
  }
  function corrColour(v) { // blue positive, orange negative, white at 0
    const t = Math.min(1, Math.abs(v));
    return v >= 0 ? "rgb(" + Math.round(255 - 224 * t) + "," + Math.round(255 - 144 * t) + "," + Math.round(255 - 20 * t) + ")"
      : "rgb(" + Math.round(255 - 61 * t) + "," + Math.round(255 - 190 * t) + "," + Math.round(255 - 243 * t) + ")";
  }
  function renderCorrelation(r) {
    const c = r.model && r.model.correlation, panel = $("corr-panel");
    panel.hidden = !c;
    if (!c) return;
    const names = st.domain.domain.attributes.map((a) => a.name), m = names.length;
    const L = 110, T = 10, cs = Math.max(26, Math.min(60, 560 / m)), W = L + m * cs + 10, H = T + m * cs + 50;
    const svg = el("svg", { viewBox: "0 0 " + W + " " + H, role: "img", class: "corr-svg" });
    for (let i = 0; i < m; i++) {
      for (let j = 0; j < m; j++) {
        const v = c[i][j];
        const cell = el("rect", { x: L + j * cs, y: T + i * cs, width: cs, height: cs, fill: corrColour(v),
          class: "cell corr-cell", "data-i": i, "data-j": j, "data-value": v }, svg);
        el("title", {}, cell, names[i] + " × " + names[j] + ": " + v.toFixed(3));
        el("text", { x: L + (j + 0.5) * cs, y: T + (i + 0.5) * cs + 4, "text-anchor": "middle", class: "cell-text" }, svg, v.toFixed(2));
      }
      el("text", { x: L - 6, y: T + (i + 0.5) * cs + 4, "text-anchor": "end" }, svg, names[i]);
      const lx = L + (i + 0.5) * cs, ly = T + m * cs + 12;
      el("text", { x: lx, y: ly, "text-anchor": "end", transform: "rotate(-35 " + lx + " " + ly + ")" }, svg, names[i]);
    }
    $("corr").replaceChildren(svg);
    $("corr-note").textContent = "Correlation of the latent Gaussian vector of the copula (estimator: " +
      r.model.correlation_estimator + "), projected to the nearest valid correlation matrix; blue positive, orange negative." +
      (r.kind === "republished" ? " Republished: the model of timestep " + r.accuracy.source_timestep + "." : "");
  }
  function renderSeries() {
    const [a, b] = st.sel, k = b - a + 1, u = unit();
    // every poll re-renders: never overwrite a field the user is typing in
    for (const [id, v] of [["sel-from", a], ["sel-to", b]]) if (document.activeElement !== $(id)) $(id).value = v;
    $("selection").textContent = k === 1 ? u + " " + a + " (" + binLabel(a) + ")" : u + "s " + a + "–" + b + " (sum of " + k + ")";
    const pts = st.releases.slice(-SERIES_N).map((r) => {
      let v = 0, w = 0;
      const hw = halfWidths(r);
      for (let i = a; i <= b; i++) { v += r.counts[i]; w = (w === null || hw[i] === null) ? null : w + hw[i]; }
      return { t: r.timestep.index, v, w, kind: isPlaceholder(r) ? "placeholder" : r.kind, conf: r.accuracy.confidence };
    });
    const W = 900, H = 260, L = 50, R = 10, T = 12, B = 30;
    const [lo, hi] = extent(pts.flatMap((p) => p.w === null ? [p.v] : [p.v - p.w, p.v + p.w]));
    const t0 = pts[0].t, t1 = Math.max(pts[pts.length - 1].t, t0 + 1);
    const x = (t) => L + (t - t0) / (t1 - t0) * (W - L - R);
    const y = (v) => T + (hi - v) / (hi - lo) * (H - T - B);
    const svg = el("svg", { viewBox: "0 0 " + W + " " + H, role: "img" });
    yAxis(svg, y, lo, hi, L, W - R);
    // the band, in runs of points that have one
    let run = [];
    const flush = () => {
      if (run.length) {
        const up = run.map((p) => x(p.t) + "," + y(p.v + p.w)), down = run.slice().reverse().map((p) => x(p.t) + "," + y(p.v - p.w));
        const d = run.length === 1 ? "M" + (x(run[0].t) - 2) + "," + y(run[0].v + run[0].w) + "h4V" + y(run[0].v - run[0].w) + "h-4Z"
          : "M" + up.join("L") + "L" + down.join("L") + "Z";
        el("path", { d, class: "band" }, svg);
      }
      run = [];
    };
    for (const p of pts) { if (p.w === null) flush(); else run.push(p); }
    flush();
    el("path", { d: "M" + pts.map((p) => x(p.t) + "," + y(p.v)).join("L"), class: "line" }, svg);
    for (const p of pts) {
      const c = el("circle", { cx: x(p.t), cy: y(p.v), r: 3.5, class: "pt " + p.kind, "data-timestep": p.t }, svg);
      el("title", {}, c, "timestep " + p.t + " (" + p.kind + "): " + fmt(p.v) + (p.w === null ? "" : " ± " + fmt(p.w)));
    }
    for (const t of ticks(t0, t1, 6)) if (Number.isInteger(t)) el("text", { x: x(t), y: H - 10, "text-anchor": "middle" }, svg, String(t));
    $("series").replaceChildren(svg);
    const conf = pts.length ? pts[pts.length - 1].conf : 0;
    $("band-note").textContent = k === 1
      ? "Band: ± the half-width; with probability " + fmt(conf * 100, 3) + "% the true count of the fresh timestep the point comes from lies inside. Republished points repeat the last fresh counts: their band says nothing about change since then."
      : "Band: the sum of the " + k + " per-bin half-widths; it holds with probability at least " +
        fmt(Math.max(0, 1 - k * (1 - conf)) * 100, 3) + "% (union bound over the bins). Republished points repeat the last fresh counts.";
  }

  start();
})();
