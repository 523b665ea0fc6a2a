// The cell monitor's charts (an anywidget module): one SVG line chart per panel, as wide as
// the output area, no plotting library. The kernel sends every panel's traces (already
// downsampled; x float64 and y float32 as binary buffers) in one trait, `panels`; a change
// or a new width redraws once, in the next animation frame. From 8 GPUs up the GPUs are one
// heatmap (trait `heatmaps`, a table), not a line each. A hover shows the values at the
// nearest step; a click on a legend entry hides or shows that trace.

const SVG = 'http://www.w3.org/2000/svg';
const HEIGHT = 220;
const M = { l: 56, r: 12, t: 10, b: 34 };

function node(tag, attrs, text) {
  const n = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) n.setAttribute(k, String(v));
  if (text !== undefined) n.textContent = text;
  return n;
}

function fmt(v) {
  if (v === 0) return '0';
  return Math.abs(v) >= 10000 || Math.abs(v) < 0.001
    ? v.toExponential(1)
    : String(Number(v.toPrecision(4)));
}

/** About `count` round ticks (1, 2 or 5 x 10^k apart) covering [lo, hi]. */
export function niceTicks(lo, hi, count) {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / count;
  const power = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 5, 10].map(f => f * power).find(s => s >= raw) || 10 * power;
  const ticks = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) {
    ticks.push(Number(v.toPrecision(12)));
  }
  return ticks;
}

/** A trace's values from the wire: a DataView of float64 (x) or float32 (y), or a list. */
function values(raw, bytes) {
  if (Array.isArray(raw)) return raw;
  if (!raw || !raw.buffer) return [];
  const copy = raw.buffer.slice(raw.byteOffset, raw.byteOffset + raw.byteLength);
  return bytes === 8 ? new Float64Array(copy) : new Float32Array(copy);
}

function extent(arrays) {
  let lo = Infinity;
  let hi = -Infinity;
  for (const a of arrays) {
    for (let k = 0; k < a.length; k++) {
      const v = a[k];
      if (Number.isFinite(v)) {
        if (v < lo) lo = v;
        if (v > hi) hi = v;
      }
    }
  }
  return lo <= hi ? [lo, hi] : [0, 1];
}

/** Index of the x in sorted `xs` nearest to `x`. */
function nearest(xs, x) {
  let lo = 0;
  let hi = xs.length - 1;
  while (hi - lo > 1) {
    const mid = (lo + hi) >> 1;
    if (xs[mid] < x) lo = mid;
    else hi = mid;
  }
  return Math.abs(xs[lo] - x) <= Math.abs(xs[hi] - x) ? lo : hi;
}

function drawPanel(panel, width, hidden, redraw) {
  const box = document.createElement('div');
  box.className = 'ktrain-WidgetPanel';
  box.dataset.panel = panel.id;
  const title = document.createElement('div');
  title.className = 'ktrain-WidgetPanelTitle';
  title.textContent = panel.title;
  box.appendChild(title);
  const traces = panel.traces.map(t => ({
    label: t.label,
    colour: t.colour || '#1f77b4',
    x: values(t.x, 8),
    y: values(t.y, 4)
  }));
  const shown = traces.filter(t => !hidden.has(`${panel.id}\n${t.label}`));
  const [x0, x1] = extent(shown.map(t => t.x));
  const [y0, y1] = extent(shown.map(t => t.y));
  const w = Math.max(width, M.l + M.r + 40);
  const sx = x => M.l + ((x - x0) / (x1 - x0 || 1)) * (w - M.l - M.r);
  const sy = y => HEIGHT - M.b - ((y - y0) / (y1 - y0 || 1)) * (HEIGHT - M.t - M.b);
  const svg = node('svg', { width: w, height: HEIGHT, viewBox: `0 0 ${w} ${HEIGHT}` });
  svg.appendChild(
    node('rect', {
      x: M.l,
      y: M.t,
      width: w - M.l - M.r,
      height: HEIGHT - M.t - M.b,
      fill: 'none',
      stroke: '#ddd'
    })
  );
  const ticks = Math.max(2, Math.min(8, Math.floor((w - M.l - M.r) / 70)));
  for (const y of niceTicks(y0, y1, 5)) {
    svg.appendChild(node('line', { x1: M.l, x2: w - M.r, y1: sy(y), y2: sy(y), stroke: '#eee' }));
    svg.appendChild(
      node('text', { x: M.l - 4, y: sy(y) + 3, 'text-anchor': 'end', class: 'ktrain-Tick' }, fmt(y))
    );
  }
  for (const x of niceTicks(x0, x1, ticks)) {
    svg.appendChild(node('line', { x1: sx(x), x2: sx(x), y1: M.t, y2: HEIGHT - M.b, stroke: '#eee' }));
    svg.appendChild(
      node('text', { x: sx(x), y: HEIGHT - M.b + 14, 'text-anchor': 'middle', class: 'ktrain-Tick' }, fmt(x))
    );
  }
  svg.appendChild(
    node('text', { x: (w + M.l) / 2, y: HEIGHT - 4, 'text-anchor': 'middle', class: 'ktrain-Axis' }, panel.x_title)
  );
  svg.appendChild(
    node('text', {
      x: 12,
      y: (HEIGHT - M.b + M.t) / 2,
      'text-anchor': 'middle',
      transform: `rotate(-90 12 ${(HEIGHT - M.b + M.t) / 2})`,
      class: 'ktrain-Axis'
    }, panel.title)
  );
  for (const marker of panel.markers || []) {
    if (marker.x < x0 || marker.x > x1) continue;
    const line = node('line', {
      x1: sx(marker.x),
      x2: sx(marker.x),
      y1: M.t,
      y2: HEIGHT - M.b,
      stroke: '#888',
      'stroke-dasharray': '3 3',
      class: 'ktrain-Marker'
    });
    line.appendChild(node('title', {}, marker.text));
    svg.appendChild(line);
    const note = node('text', { x: sx(marker.x), y: M.t + 12, 'text-anchor': 'middle', class: 'ktrain-Tick' }, '↻');
    note.appendChild(node('title', {}, marker.text));
    svg.appendChild(note);
  }
  for (const t of shown) {
    const points = [];
    for (let k = 0; k < t.x.length; k++) {
      if (Number.isFinite(t.y[k])) points.push(`${sx(t.x[k]).toFixed(1)},${sy(t.y[k]).toFixed(1)}`);
    }
    const line = node('polyline', { points: points.join(' '), fill: 'none', stroke: t.colour, 'stroke-width': 1.5 });
    line.dataset.label = t.label;
    line.dataset.points = String(t.x.length);
    svg.appendChild(line);
  }
  // hover: the values of every shown trace at the step nearest the pointer
  const cursor = node('line', { y1: M.t, y2: HEIGHT - M.b, stroke: '#999', visibility: 'hidden' });
  svg.appendChild(cursor);
  const tip = document.createElement('div');
  tip.className = 'ktrain-WidgetTip';
  tip.hidden = true;
  svg.addEventListener('mousemove', event => {
    const rect = svg.getBoundingClientRect();
    const px = event.clientX - rect.left;
    if (px < M.l || px > w - M.r || !shown.length) {
      tip.hidden = true;
      cursor.setAttribute('visibility', 'hidden');
      return;
    }
    const x = x0 + ((px - M.l) / (w - M.l - M.r)) * (x1 - x0);
    const rows = shown
      .filter(t => t.x.length)
      .map(t => {
        const k = nearest(t.x, x);
        return [t, t.x[k], t.y[k]];
      });
    const at = rows.length ? rows[0][1] : x;
    tip.replaceChildren(`${panel.x_title} ${fmt(at)}`);
    for (const [t, , y] of rows) {
      const row = document.createElement('div');
      row.style.color = t.colour;
      row.textContent = `${t.label}: ${fmt(y)}`;
      tip.appendChild(row);
    }
    cursor.setAttribute('x1', sx(at));
    cursor.setAttribute('x2', sx(at));
    cursor.setAttribute('visibility', 'visible');
    tip.hidden = false;
    const left = Math.min(px + 12, Math.max(0, w - 160));
    tip.style.left = `${left}px`;
    tip.style.top = `${M.t + 20}px`;
  });
  svg.addEventListener('mouseleave', () => {
    tip.hidden = true;
    cursor.setAttribute('visibility', 'hidden');
  });
  const plot = document.createElement('div');
  plot.className = 'ktrain-WidgetPlot';
  plot.append(svg, tip);
  box.appendChild(plot);
  // one legend per panel, under it, wrapping at any width; a click hides or shows a trace
  const legend = document.createElement('div');
  legend.className = 'ktrain-WidgetLegend';
  for (const t of traces) {
    const key = `${panel.id}\n${t.label}`;
    const item = document.createElement('span');
    item.style.color = t.colour;
    item.style.opacity = hidden.has(key) ? '0.4' : '1';
    item.title = 'click to hide or show';
    item.textContent = `— ${t.label}`;
    item.addEventListener('click', () => {
      if (hidden.has(key)) hidden.delete(key);
      else hidden.add(key);
      redraw();
    });
    legend.appendChild(item);
  }
  box.appendChild(legend);
  return box;
}

/** From 8 GPUs up: one field's heatmap (rows: nodes, columns: GPU indexes), a selector for
 * the field; the kernel sends each cell's colour, mark and words (jupyter_ktrain.monitor.glance). */
function drawHeatmap(grids, state, redraw) {
  const grid = grids.find(g => g.field === state.field) || grids[0];
  const box = document.createElement('div');
  box.className = 'ktrain-WidgetPanel ktrain-WidgetHeatmap';
  box.dataset.field = grid.field;
  const head = document.createElement('div');
  head.className = 'ktrain-WidgetPanelTitle';
  const select = document.createElement('select');
  select.className = 'ktrain-HeatField';
  for (const g of grids) select.add(new Option(g.title, g.field));
  select.value = grid.field;
  select.addEventListener('change', () => {
    state.field = select.value;
    redraw();
  });
  const count = document.createElement('span');
  count.className = 'ktrain-HeatCount';
  count.textContent = ` ${grid.idle} idle · ${grid.hot} hot`;
  head.append(select, count);
  const table = document.createElement('table');
  table.className = 'ktrain-HeatTable';
  const top = table.insertRow();
  top.appendChild(document.createElement('th'));
  for (const g of grid.gpus) {
    const th = document.createElement('th');
    th.textContent = `GPU ${g}`;
    top.appendChild(th);
  }
  for (const row of grid.rows) {
    const tr = table.insertRow();
    const th = document.createElement('th');
    th.textContent = row.name;
    tr.appendChild(th);
    for (const c of row.cells) {
      const td = tr.insertCell();
      td.textContent = c.label;
      td.title = c.title;
      td.style.background = c.colour;
      td.dataset.mark = c.mark;
      td.dataset.gpu = String(c.gpu);
    }
  }
  box.append(head, table);
  return box;
}

const CSS = `
.ktrain-WidgetChart { display: block; width: 100%; min-width: 0; box-sizing: border-box; }
.ktrain-WidgetPanel { margin: 4px 0 10px; }
.ktrain-WidgetPanelTitle { font-weight: bold; font-size: 12px; margin-left: ${M.l}px; }
.ktrain-WidgetPlot { position: relative; }
.ktrain-WidgetPlot svg { display: block; font-size: 10px; overflow: hidden; max-width: 100%;
  height: auto; }
.ktrain-WidgetPlot .ktrain-Tick { fill: #666; }
.ktrain-WidgetPlot .ktrain-Axis { fill: #444; font-size: 11px; }
.ktrain-WidgetLegend { display: flex; flex-wrap: wrap; gap: 2px 12px; font-size: 11px;
  margin-left: ${M.l}px; cursor: pointer; user-select: none; }
.ktrain-WidgetHeatmap .ktrain-WidgetPanelTitle { margin-left: 0; }
.ktrain-HeatCount { font-weight: normal; margin-left: 6px; }
.ktrain-HeatTable { border-collapse: collapse; font-size: 11px; margin-top: 4px; }
.ktrain-HeatTable th { font-weight: normal; padding: 1px 6px; text-align: right; }
.ktrain-HeatTable td { min-width: 34px; padding: 3px 4px; text-align: center;
  border: 1px solid #fff; text-shadow: 0 0 2px #fff; }
.ktrain-HeatTable td[data-mark='idle'] { color: #fff; text-shadow: none; }
.ktrain-HeatTable td[data-mark='hot'] { font-weight: bold; outline: 2px solid #000;
  outline-offset: -2px; }
.ktrain-WidgetTip { position: absolute; pointer-events: none; font-size: 11px; padding: 3px 6px;
  background: rgba(255, 255, 255, 0.92); border: 1px solid #ccc; border-radius: 3px;
  white-space: nowrap; }
`;

function render({ model, el }) {
  el.classList.add('ktrain-WidgetChart');
  const style = document.createElement('style');
  style.textContent = CSS;
  el.appendChild(style);
  const body = document.createElement('div');
  el.appendChild(body);
  const hidden = new Set(); // "panel\nlabel" of the traces the user hid
  const heat = { field: null }; // the heatmap's field the user chose
  let frame = 0;
  let width = -1;
  let stale = true;
  const draw = () => {
    frame = 0;
    const now = el.clientWidth;
    if (now <= 0 || (!stale && now === width)) return; // not shown, or nothing changed
    width = now;
    stale = false;
    const began = performance.now();
    const panels = model.get('panels') || [];
    const grids = model.get('heatmaps') || [];
    const heatmap = grids.length ? [drawHeatmap(grids, heat, redraw)] : [];
    body.replaceChildren(...heatmap, ...panels.map(p => drawPanel(p, now, hidden, redraw)));
    // each redraw on the page's timeline (the browser's performance tools; the tests)
    performance.measure('ktrain-widget-redraw', { start: began });
  };
  const schedule = () => {
    if (!frame) frame = requestAnimationFrame(draw);
  };
  const redraw = () => {
    stale = true;
    schedule();
  };
  model.on('change:panels', redraw);
  model.on('change:heatmaps', redraw);
  const resize = new ResizeObserver(schedule);
  resize.observe(el);
  redraw();
  return () => {
    resize.disconnect();
    if (frame) cancelAnimationFrame(frame);
    model.off('change:panels', redraw);
    model.off('change:heatmaps', redraw);
  };
}

export default { render };
