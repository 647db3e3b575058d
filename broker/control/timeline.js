// The transaction timeline (plain SVG), shared by the console and the exported page
// (broker.admin.console.timeline_html): addEvents(events), then renderTimeline(nowMs).
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

// Each transaction: from its first add (Ongoing) to its end, with its prepare and markers.
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
      bar = current[e.transactional_id] = { id: e.transactional_id, start: e.time_ms, end: null, outcome: "open",
        epochs: new Set(), partitions: new Set(), prepare: null, markers: [], producerId: e.producer_id };
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

function renderTimeline(nowMs) {
  const box = document.querySelector('[data-testid="timeline"]');
  if (!history.length) { box.textContent = "no events yet"; box.className = "empty"; return; }
  box.className = "";
  const width = Math.max(700, document.body.clientWidth - 60), left = 180, right = 20, lane = 20;
  const t0 = history[0].time_ms, t1 = Math.max(nowMs || 0, history[history.length - 1].time_ms, t0 + 1);
  const x = t => left + (t - t0) / (t1 - t0) * (width - left - right);
  const bars = transactionBars(history);
  const ids = [...new Set(bars.map(b => b.id))];
  const parts = {};
  for (const e of history) if (e.kind === "partition" && !e.topic.startsWith("__")) (parts[`${e.topic}-${e.partition}`] ||= []).push(e);
  const strip = 40, top = 24;
  const height = top + ids.length * lane + 10 + Object.keys(parts).length * (strip + 8) + 10;
  const root = svg("svg", { width, height, "data-testid": "timeline-svg" });
  root.appendChild(svg("text", { x: left, y: 12 }, null)).textContent = new Date(t0).toISOString();
  root.appendChild(svg("text", { x: width - right, y: 12, "text-anchor": "end" }, null)).textContent = new Date(t1).toISOString();
  ids.forEach((id, i) => {
    const y = top + i * lane;
    const label = root.appendChild(svg("text", { x: 4, y: y + 13, "data-testid": "lane", "data-tid": id }, id));
    label.appendChild(document.createTextNode(id.length > 26 ? id.slice(0, 25) + "…" : id));
  });
  for (const b of bars) {
    const y = top + ids.indexOf(b.id) * lane + 3, end = b.end ?? t1;
    const epochs = [...b.epochs].join(", "), partitions = [...b.partitions].join(", ");
    const title = `${b.id}: ${b.outcome}\nproducer ${b.producerId}, epoch ${epochs}\npartitions ${partitions}` +
      (b.prepare ? `\n${b.prepare.state}${b.prepare.reason ? ` (${b.prepare.reason})` : ""} at ${new Date(b.prepare.time).toISOString()}` : "") +
      b.markers.map(m => `\n${m.marker} marker on ${m.partitions.join(", ")} (coordinator epoch ${m.coordinator_epoch})`).join("");
    root.appendChild(svg("rect", { x: x(b.start), y, width: Math.max(3, x(end) - x(b.start)), height: lane - 6,
      class: `bar outcome-${b.outcome.replace(" ", "-")}`, "data-testid": "txn-bar", "data-tid": b.id,
      "data-outcome": b.outcome, "data-partitions": partitions }, title));
    if (b.prepare) root.appendChild(svg("line", { x1: x(b.prepare.time), x2: x(b.prepare.time), y1: y, y2: y + lane - 6,
      class: "prepare", "data-testid": "txn-prepare" }, `${b.prepare.state} ${b.id}`));
    for (const m of b.markers) root.appendChild(svg("line", { x1: x(m.time_ms), x2: x(m.time_ms), y1: y - 2, y2: y + lane - 4,
      class: "tick", "data-testid": "txn-marker" }, `${m.marker} marker of ${b.id} on ${m.partitions.join(", ")}`));
  }
  const bottom = height - 4;
  for (const e of history) {
    if (!["fault", "control", "node", "coordinator"].includes(e.kind)) continue;
    const what = e.kind === "fault" ? `fault rule ${e.rule_id} fired: ${e.action} on ${e.request}`
      : e.kind === "node" ? `node ${e.node} ${e.change}`
      : e.kind === "coordinator" ? `${e.topic}-${e.partition} coordinator moved from node ${e.node_from} to node ${e.node_to} (epoch ${e.coordinator_epoch})`
      : `${e.op} ${Object.entries(e.args || {}).map(([k, v]) => `${k}=${v}`).join(" ")}`;
    root.appendChild(svg("line", { x1: x(e.time_ms), x2: x(e.time_ms), y1: 16, y2: bottom,
      class: `event-${e.kind}`, "stroke-width": 3, "data-testid": "timeline-event", "data-kind": e.kind,
      "data-what": what }, `${new Date(e.time_ms).toISOString()} ${what}`));
  }
  let y0 = top + ids.length * lane + 10;
  for (const [name, series] of Object.entries(parts)) {
    const max = Math.max(1, ...series.map(e => e.high_watermark)), ys = v => y0 + strip - v / max * (strip - 4);
    root.appendChild(svg("text", { x: 4, y: y0 + strip / 2 }, null)).textContent = name;
    series.forEach((e, i) => {
      const next = i + 1 < series.length ? series[i + 1].time_ms : t1;
      if (e.held_by) root.appendChild(svg("rect", { x: x(e.time_ms), y: ys(e.high_watermark),
        width: Math.max(2, x(next) - x(e.time_ms)), height: Math.max(2, ys(e.last_stable_offset) - ys(e.high_watermark)),
        class: "lso-gap", "data-testid": "lso-gap", "data-partition": name, "data-held-by": e.held_by },
        `${name}: LSO held at ${e.last_stable_offset} (high watermark ${e.high_watermark}) by ${e.held_by}`));
    });
    for (const [key, cls] of [["high_watermark", "hw"], ["last_stable_offset", "lso"]]) {
      let d = "";
      series.forEach((e, i) => {
        const next = i + 1 < series.length ? series[i + 1].time_ms : t1;
        d += `${i ? "L" : "M"}${x(e.time_ms)},${ys(e[key])} L${x(next)},${ys(e[key])} `;
      });
      root.appendChild(svg("path", { d, class: cls, "data-testid": `${cls}-line`, "data-partition": name }));
    }
    y0 += strip + 8;
  }
  box.replaceChildren(root);
}
