/**
 * A small SVG line chart (one per metric panel): no plotting library in the bundle. The server
 * already downsampled every trace, so drawing is a polyline per trace.
 */
import { MetricPanel } from './payloads';

const SVG = 'http://www.w3.org/2000/svg';
const COLOURS = [
  '#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e',
  '#17becf', '#8c564b', '#e377c2', '#bcbd22', '#7f7f7f'
];

function el(tag: string, attrs: { [k: string]: string | number }, text?: string): SVGElement {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) {
    node.setAttribute(k, String(v));
  }
  if (text !== undefined) {
    node.textContent = text;
  }
  return node;
}

function fmt(v: number): string {
  return Math.abs(v) >= 1000 || (Math.abs(v) < 0.01 && v !== 0) ? v.toExponential(2) : v.toPrecision(3);
}

export function renderChart(panel: MetricPanel, width = 420, height = 220): HTMLElement {
  const box = document.createElement('div');
  box.className = 'ktrain-Chart';
  box.dataset.metric = panel.name;
  const m = { l: 56, r: 10, t: 22, b: 34 };
  const svg = el('svg', { width, height, viewBox: `0 0 ${width} ${height}` });
  const xs = panel.traces.flatMap(t => t.x);
  const ys = panel.traces.flatMap(t => t.y);
  const [x0, x1] = xs.length ? [Math.min(...xs), Math.max(...xs)] : [0, 1];
  const [y0, y1] = ys.length ? [Math.min(...ys), Math.max(...ys)] : [0, 1];
  const sx = (x: number) => m.l + ((x - x0) / (x1 - x0 || 1)) * (width - m.l - m.r);
  const sy = (y: number) => height - m.b - ((y - y0) / (y1 - y0 || 1)) * (height - m.t - m.b);
  svg.appendChild(el('text', { x: width / 2, y: 14, 'text-anchor': 'middle', class: 'ktrain-ChartTitle' }, panel.name));
  svg.appendChild(el('rect', { x: m.l, y: m.t, width: width - m.l - m.r, height: height - m.t - m.b, class: 'ktrain-ChartFrame' }));
  svg.appendChild(el('text', { x: m.l - 4, y: m.t + 10, 'text-anchor': 'end' }, fmt(y1)));
  svg.appendChild(el('text', { x: m.l - 4, y: height - m.b, 'text-anchor': 'end' }, fmt(y0)));
  svg.appendChild(el('text', { x: m.l, y: height - m.b + 14, 'text-anchor': 'start' }, fmt(x0)));
  svg.appendChild(el('text', { x: width - m.r, y: height - m.b + 14, 'text-anchor': 'end' }, fmt(x1)));
  svg.appendChild(el('text', { x: (width + m.l) / 2, y: height - 4, 'text-anchor': 'middle' }, panel.x_title));
  panel.traces.forEach((trace, i) => {
    const points = trace.x.map((x, k) => `${sx(x).toFixed(1)},${sy(trace.y[k]).toFixed(1)}`).join(' ');
    const line = el('polyline', { points, fill: 'none', stroke: COLOURS[i % COLOURS.length], 'stroke-width': 1.5 });
    line.dataset.label = trace.label;
    line.dataset.points = String(trace.x.length);
    svg.appendChild(line);
  });
  box.appendChild(svg);
  const legend = document.createElement('div');
  legend.className = 'ktrain-ChartLegend';
  panel.traces.forEach((trace, i) => {
    const item = document.createElement('span');
    item.style.color = COLOURS[i % COLOURS.length];
    item.textContent = `— ${trace.label}`;
    legend.appendChild(item);
  });
  box.appendChild(legend);
  return box;
}
