// The transaction timeline (plain SVG), shared by the console and the exported page
// (broker.control.console.timeline_html): addEvents(events), then renderTimeline(nowMs).
// Its time axis zooms (wheel, buttons) and scrolls (drag, buttons) over the history held.
// The event history (GET /events; the stream brings the new ones): kept here, bounded.
const HISTORY_MAX = 20000;
let history = [];
function addEvents(events) {
  if (!events || !events.length) return;
  const last = history.length ? history[history.length - 1].seq : -1;
  if (events[0].seq <= last) history = history.filter(e => e.seq < events[0].seq);  // a new stream: from its start
  history = history.concat(events);
  if (history.length > HISTORY_MAX) history = history.slice(history.length - HISTORY_MAX);
}

const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs, title) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  if (title) { const t = document.createElementNS(SVG, "title"); t.textContent = title; el.appendChild(t); }
  return el;
}

// Each transaction: from its first add (Ongoing) to its end, with its prepare and markers;
// one its coordinator found open at load (begun before a restart) from when it began.
function transactionBars(events) {
  const bars = [], current = {};
  for (const e of events) {
    if (e.kind === "marker") {
      const bar = current[e.transactional_id] || bars.filter(b => b.id === e.transactional_id).pop();
      if (bar) bar.markers.push(e);
      continue;
    }
    if (e.kind !== "txn") continue;
    let bar = current[e.transactional_id];
    if (!bar && (e.state === "Ongoing" || e.state.startsWith("Prepare"))) {
      const start = e.loaded && e.start_time_ms >= 0 ? Math.min(e.start_time_ms, e.time_ms) : e.time_ms;
      bar = current[e.transactional_id] = { id: e.transactional_id, start, end: null, outcome: "open",
        epochs: new Set(), partitions: new Set(), prepare: null, markers: [], producerId: e.producer_id,
        loadedAt: e.loaded ? e.time_ms : null };
      bars.push(bar);
    }
    if (!bar) continue;
    bar.epochs.add(e.producer_epoch);
    for (const p of e.partitions) bar.partitions.add(p);
    if (e.state.startsWith("Prepare")) bar.prepare = { time: e.time_ms, state: e.state, reason: e.reason };
    if (e.outcome) { bar.end = e.time_ms; bar.outcome = e.outcome; delete current[e.transactional_id]; }
  }
  return bars;
}

// The time window shown: null follows the whole history as it grows; [t0, t1] once zoomed.
let view = null, lastNowMs = 0, dragFrom = null;
function fullRange(nowMs) {
  const t0 = history[0].time_ms;
  return [t0, Math.max(nowMs || 0, history[history.length - 1].time_ms, t0 + 1)];
}
function setView(a, b) {
  const [f0, f1] = fullRange(lastNowMs), span = Math.min(f1 - f0, Math.max(b - a, 1));
  if (span >= f1 - f0) { view = null; } else {
    a = Math.min(Math.max(a, f0), f1 - span);
    view = [a, a + span];
  }
  renderTimeline(lastNowMs);
}
// factor < 1 zooms in around centre (a time; the window's middle by default).
function zoomTimeline(factor, centre) {
  if (!history.length) return;
  const [a, b] = view || fullRange(lastNowMs), c = centre ?? (a + b) / 2;
  setView(c - (c - a) * factor, c + (b - c) * factor);
}
function scrollTimeline(fraction) {
  if (!history.length) return;
  const [a, b] = view || fullRange(lastNowMs), d = (b - a) * fraction;
  setView(a + d, b + d);
}

function timelineControls(v0, v1) {
  const bar = document.createElement("div");
  bar.className = "timeline-controls";
  for (const [label, testid, title, what] of [
    ["−", "zoom-out", "zoom out", () => zoomTimeline(2)], ["+", "zoom-in", "zoom in", () => zoomTimeline(0.5)],
    ["◀", "scroll-back", "earlier", () => scrollTimeline(-0.5)], ["▶", "scroll-forward", "later", () => scrollTimeline(0.5)],
    ["all", "zoom-all", "the whole history, following new events", () => { view = null; renderTimeline(lastNowMs); }]]) {
    const b = document.createElement("button");
    b.type = "button"; b.textContent = label; b.title = title; b.dataset.testid = testid;
    b.addEventListener("click", what);
    bar.appendChild(b);
  }
  const span = document.createElement("span");
  span.dataset.testid = "timeline-window";
  span.textContent = ` ${new Date(v0).toISOString()} → ${new Date(v1).toISOString()}` +
    (view ? " (zoomed: wheel or buttons; drag to scroll)" : " (all; wheel to zoom)");
  bar.appendChild(span);
  return bar;
}

const offsetsText = offsets => Object.entries(offsets).map(([p, o]) => o === null ? p : `${p}@${o}`).join(", ");
function groupText(e) {
  if (e.kind === "group" && e.deleted) {
    return `${e.group_id}: ${e.protocol ?? ""} group deleted` + (e.left.length ? ` (members last seen: ${e.left.join(", ")})` : "") +
      (e.offsets_deleted.length ? `, with its offsets of ${e.offsets_deleted.join(", ")}` : "");
  }
  if (e.kind === "group") {
    return `${e.group_id}: ${e.protocol} group ${e.state}` + (e.rebalance ? ` (rebalance ${e.rebalance})` : "") +
      `, ${e.protocol === "classic" ? "generation" : "epoch"} ${e.generation}, ` +
      `${e.members} member${e.members === 1 ? "" : "s"}` + (e.joined.length ? `; joined: ${e.joined.join(", ")}` : "") +
      (e.left.length ? `; left: ${e.left.join(", ")}` : "");
  }
  return `${e.group_id}: offsets ${e.state} ${offsetsText(e.offsets)}` +
    (e.producer_id !== undefined ? ` (transaction ${e.transactional_id ?? `of producer ${e.producer_id}`})` : "");
}

function renderTimeline(nowMs) {
  lastNowMs = nowMs || lastNowMs;
  const box = document.querySelector('[data-testid="timeline"]');
  if (!history.length) { box.textContent = "no events yet"; box.className = "empty"; return; }
  box.className = "";
  const width = Math.max(700, document.body.clientWidth - 60), left = 180, right = 20, lane = 20;
  const [t0, t1] = view || fullRange(lastNowMs);
  const x = t => left + (t - t0) / (t1 - t0) * (width - left - right);
  const tAt = px => t0 + (px - left) / (width - left - right) * (t1 - t0);
  const seen = (a, b) => b >= t0 && a <= t1;  // drawn only when in the window
  const end = history[history.length - 1].time_ms, tEnd = Math.max(lastNowMs, end);
  const bars = transactionBars(history);
  const ids = [...new Set(bars.map(b => b.id))];
  const groups = [...new Set(history.filter(e => e.kind === "group" || e.kind === "offsets").map(e => e.group_id))];
  const parts = {}, committed = {};
  for (const e of history) {
    if (e.kind === "partition" && !e.topic.startsWith("__")) (parts[`${e.topic}-${e.partition}`] ||= []).push(e);
    if (e.kind === "offsets" && e.state === "committed") {
      for (const [p, o] of Object.entries(e.offsets)) ((committed[p] ||= {})[e.group_id] ||= []).push({ time_ms: e.time_ms, offset: o });
    }
  }
  const strip = 40, top = 24, groupsTop = top + ids.length * lane;
  const height = groupsTop + groups.length * lane + 10 + Object.keys(parts).length * (strip + 8) + 10;
  const root = svg("svg", { width, height, "data-testid": "timeline-svg", "data-t0": t0, "data-t1": t1 });
  const clip = root.appendChild(svg("clipPath", { id: "timeline-clip" }));
  clip.appendChild(svg("rect", { x: left, y: 0, width: width - left - right, height }));
  root.appendChild(svg("text", { x: left, y: 12 }, null)).textContent = new Date(t0).toISOString();
  root.appendChild(svg("text", { x: width - right, y: 12, "text-anchor": "end" }, null)).textContent = new Date(t1).toISOString();
  const plot = root.appendChild(svg("g", { "clip-path": "url(#timeline-clip)" }));
  const label = (y, text, attrs) => {
    const el = root.appendChild(svg("text", { x: 4, y, ...attrs }, text));
    el.appendChild(document.createTextNode(text.length > 26 ? text.slice(0, 25) + "…" : text));
  };
  ids.forEach((id, i) => label(top + i * lane + 13, id, { "data-testid": "lane", "data-tid": id }));
  groups.forEach((g, i) => label(groupsTop + i * lane + 13, `group ${g}`, { "data-testid": "group-lane", "data-group": g }));
  for (const b of bars) {
    const y = top + ids.indexOf(b.id) * lane + 3, barEnd = b.end ?? tEnd;
    if (!seen(b.start, barEnd)) continue;
    const epochs = [...b.epochs].join(", "), partitions = [...b.partitions].join(", ");
    const title = `${b.id}: ${b.outcome}\nproducer ${b.producerId}, epoch ${epochs}\npartitions ${partitions}` +
      (b.loadedAt !== null ? `\nbegun at ${new Date(b.start).toISOString()}, found open by its coordinator's load at ` +
        new Date(b.loadedAt).toISOString() : "") +
      (b.prepare ? `\n${b.prepare.state}${b.prepare.reason ? ` (${b.prepare.reason})` : ""} at ${new Date(b.prepare.time).toISOString()}` : "") +
      b.markers.map(m => `\n${m.marker} marker on ${m.partitions.join(", ")} (coordinator epoch ${m.coordinator_epoch})`).join("");
    plot.appendChild(svg("rect", { x: x(b.start), y, width: Math.max(3, x(barEnd) - x(b.start)), height: lane - 6,
      class: `bar outcome-${b.outcome.replace(" ", "-")}`, "data-testid": "txn-bar", "data-tid": b.id,
      "data-outcome": b.outcome, "data-partitions": partitions }, title));
    if (b.prepare) plot.appendChild(svg("line", { x1: x(b.prepare.time), x2: x(b.prepare.time), y1: y, y2: y + lane - 6,
      class: "prepare", "data-testid": "txn-prepare" }, `${b.prepare.state} ${b.id}`));
    for (const m of b.markers) plot.appendChild(svg("line", { x1: x(m.time_ms), x2: x(m.time_ms), y1: y - 2, y2: y + lane - 4,
      class: "tick", "data-testid": "txn-marker" }, `${m.marker} marker of ${b.id} on ${m.partitions.join(", ")}`));
  }
  const rebalancing = {};  // group -> the start of its rebalance under way
  const band = (g, from, to, what) => {
    if (!seen(from, to)) return;
    const y = groupsTop + groups.indexOf(g) * lane + 3;
    plot.appendChild(svg("rect", { x: x(from), y, width: Math.max(2, x(to) - x(from)), height: lane - 6,
      class: "rebalancing", "data-testid": "group-rebalancing", "data-group": g, "data-ended": to === tEnd ? "" : to },
      `${g}: rebalancing from ${new Date(from).toISOString()}${what}`));
  };
  for (const e of history) {
    if (e.kind !== "group") continue;
    if (e.rebalance === "started") rebalancing[e.group_id] = e.time_ms;
    else if ((e.rebalance === "ended" || e.deleted) && rebalancing[e.group_id] !== undefined) {
      band(e.group_id, rebalancing[e.group_id], e.time_ms, ` to ${new Date(e.time_ms).toISOString()}`);
      delete rebalancing[e.group_id];
    }
  }
  for (const [g, from] of Object.entries(rebalancing)) band(g, from, tEnd, ", still under way");
  for (const e of history) {
    if ((e.kind !== "group" && e.kind !== "offsets") || !seen(e.time_ms, e.time_ms)) continue;
    const y = groupsTop + groups.indexOf(e.group_id) * lane + lane / 2 - 1, cx = x(e.time_ms);
    const what = groupText(e);
    if (e.kind === "group" && e.deleted) {
      plot.appendChild(svg("path", { d: `M${cx - 5},${y - 5} L${cx + 5},${y + 5} M${cx - 5},${y + 5} L${cx + 5},${y - 5}`,
        class: "group-deleted", "data-testid": "group-deleted", "data-group": e.group_id, "data-what": what },
        `${new Date(e.time_ms).toISOString()} ${what}`));
    } else if (e.kind === "group") {
      plot.appendChild(svg("polygon", { points: `${cx},${y - 7} ${cx + 6},${y} ${cx},${y + 7} ${cx - 6},${y}`,
        class: "rebalance", "data-testid": "group-rebalance", "data-group": e.group_id, "data-generation": e.generation,
        "data-protocol": e.protocol, "data-what": what }, `${new Date(e.time_ms).toISOString()} ${what}`));
    } else {
      plot.appendChild(svg("circle", { cx, cy: y, r: 3.5, class: `commit-${e.state}`, "data-testid": "group-commit",
        "data-group": e.group_id, "data-state": e.state, "data-what": what }, `${new Date(e.time_ms).toISOString()} ${what}`));
    }
  }
  const bottom = height - 4;
  for (const e of history) {
    if (!["fault", "control", "node", "coordinator"].includes(e.kind) || !seen(e.time_ms, e.time_ms)) continue;
    const what = e.kind === "fault" ? `fault rule ${e.rule_id} fired: ${e.action} on ${e.request}`
      : e.kind === "node" ? `node ${e.node} ${e.change}`
      : e.kind === "coordinator" ? `${e.topic}-${e.partition} coordinator moved from node ${e.node_from} to node ${e.node_to} (epoch ${e.coordinator_epoch})`
      : `${e.op} ${Object.entries(e.args || {}).map(([k, v]) => `${k}=${v}`).join(" ")}${e.by ? ` (by ${e.by})` : ""}`;
    plot.appendChild(svg("line", { x1: x(e.time_ms), x2: x(e.time_ms), y1: 16, y2: bottom,
      class: `event-${e.kind}`, "stroke-width": 3, "data-testid": "timeline-event", "data-kind": e.kind,
      "data-what": what, ...(e.by ? { "data-by": e.by } : {}) }, `${new Date(e.time_ms).toISOString()} ${what}`));
  }
  let y0 = groupsTop + groups.length * lane + 10;
  const step = (series, key, cls, attrs) => {  // a value held from each event to the next
    let d = "";
    series.forEach((e, i) => {
      const next = i + 1 < series.length ? series[i + 1].time_ms : tEnd;
      d += `${i ? "L" : "M"}${x(e.time_ms)},${key(e)} L${x(next)},${key(e)} `;
    });
    plot.appendChild(svg("path", { d, class: cls, ...attrs }));
  };
  for (const [name, series] of Object.entries(parts)) {
    const commits = committed[name] || {};
    const max = Math.max(1, ...series.map(e => e.high_watermark), ...Object.values(commits).flat().map(c => c.offset));
    const ys = v => y0 + strip - v / max * (strip - 4);
    root.appendChild(svg("text", { x: 4, y: y0 + strip / 2 }, null)).textContent = name;
    series.forEach((e, i) => {
      const next = i + 1 < series.length ? series[i + 1].time_ms : tEnd;
      if (e.held_by && seen(e.time_ms, next)) plot.appendChild(svg("rect", { x: x(e.time_ms), y: ys(e.high_watermark),
        width: Math.max(2, x(next) - x(e.time_ms)), height: Math.max(2, ys(e.last_stable_offset) - ys(e.high_watermark)),
        class: "lso-gap", "data-testid": "lso-gap", "data-partition": name, "data-held-by": e.held_by },
        `${name}: LSO held at ${e.last_stable_offset} (high watermark ${e.high_watermark}) by ${e.held_by}`));
    });
    step(series, e => ys(e.high_watermark), "hw", { "data-testid": "hw-line", "data-partition": name });
    step(series, e => ys(e.last_stable_offset), "lso", { "data-testid": "lso-line", "data-partition": name });
    for (const [group, commitSeries] of Object.entries(commits)) {
      step(commitSeries, c => ys(c.offset), "committed", { "data-testid": "committed-line", "data-partition": name,
        "data-group": group });
      plot.lastChild.appendChild(svg("title", {}, null)).textContent =
        `${name}: committed by ${group} at ${commitSeries.map(c => c.offset).join(", ")}`;
    }
    y0 += strip + 8;
  }
  const px = e => e.clientX - root.getBoundingClientRect().left;
  root.addEventListener("wheel", e => {
    if (px(e) < left) return;
    e.preventDefault();
    zoomTimeline(e.deltaY < 0 ? 0.8 : 1.25, tAt(px(e)));
  }, { passive: false });
  root.addEventListener("mousedown", e => { dragFrom = e.clientX; });
  root.addEventListener("mouseup", e => {  // a drag (the page may redraw meanwhile: kept outside)
    if (dragFrom !== null && Math.abs(e.clientX - dragFrom) > 3) scrollTimeline((dragFrom - e.clientX) / (width - left - right));
    dragFrom = null;
  });
  box.replaceChildren(timelineControls(t0, t1), root);
}
