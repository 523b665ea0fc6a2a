/**
 * A small SVG line chart (one per metric panel): no plotting library in the bundle. The server
 * already downsampled every trace, so drawing is a polyline per trace.
 */
import { MetricPanel, SummaryPayload } from './payloads';

const SVG = 'http://www.w3.org/2000/svg';

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
  if (v === 0) {
    return '0';
  }
  return Math.abs(v) >= 10000 || Math.abs(v) < 0.001
    ? v.toExponential(1)
    : String(Number(v.toPrecision(4)));
}

/** About ``count`` round tick values (1, 2 or 5 x 10^k apart) covering [lo, hi]. */
export function niceTicks(lo: number, hi: number, count = 5): number[] {
  if (!(hi > lo)) {
    return [lo];
  }
  const raw = (hi - lo) / count;
  const power = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 5, 10].map(f => f * power).find(s => s >= raw) ?? 10 * power;
  const ticks: number[] = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) {
    ticks.push(Number(v.toPrecision(12)));
  }
  return ticks;
}

export function renderChart(panel: MetricPanel, width = 420, height = 220): HTMLElement {
  const box = document.createElement('div');
  box.className = 'ktrain-Chart';
  box.dataset.metric = panel.name;
  box.dataset.key = panel.key;
  const m = { l: 56, r: 10, t: 22, b: 34 };
  const svg = el('svg', { width, height, viewBox: `0 0 ${width} ${height}` });
  const xs = panel.traces.flatMap(t => t.x);
  const ys = panel.traces.flatMap(t => t.y);
  const [x0, x1] = xs.length ? [Math.min(...xs), Math.max(...xs)] : [0, 1];
  const [y0, y1] = ys.length ? [Math.min(...ys), Math.max(...ys)] : [0, 1];
  const sx = (x: number) => m.l + ((x - x0) / (x1 - x0 || 1)) * (width - m.l - m.r);
  const sy = (y: number) => height - m.b - ((y - y0) / (y1 - y0 || 1)) * (height - m.t - m.b);
  svg.appendChild(
    el(
      'text',
      { x: width / 2, y: 14, 'text-anchor': 'middle', class: 'ktrain-ChartTitle' },
      panel.title
    )
  );
  svg.appendChild(
    el('rect', {
      x: m.l,
      y: m.t,
      width: width - m.l - m.r,
      height: height - m.t - m.b,
      class: 'ktrain-ChartFrame'
    })
  );
  // readable ticks: round values with grid lines, not just the two ends
  for (const y of niceTicks(y0, y1)) {
    svg.appendChild(
      el('line', { x1: m.l, x2: width - m.r, y1: sy(y), y2: sy(y), class: 'ktrain-ChartGrid' })
    );
    svg.appendChild(
      el(
        'text',
        { x: m.l - 4, y: sy(y) + 3, 'text-anchor': 'end', class: 'ktrain-Tick ktrain-YTick' },
        fmt(y)
      )
    );
  }
  for (const x of niceTicks(x0, x1)) {
    svg.appendChild(
      el('line', { x1: sx(x), x2: sx(x), y1: m.t, y2: height - m.b, class: 'ktrain-ChartGrid' })
    );
    svg.appendChild(
      el(
        'text',
        {
          x: sx(x),
          y: height - m.b + 14,
          'text-anchor': 'middle',
          class: 'ktrain-Tick ktrain-XTick'
        },
        fmt(x)
      )
    );
  }
  svg.appendChild(
    el('text', { x: (width + m.l) / 2, y: height - 4, 'text-anchor': 'middle' }, panel.x_title)
  );
  // the job's restarts: a dotted line at each, its text on hover
  for (const marker of panel.markers) {
    if (marker.x < x0 || marker.x > x1) {
      continue;
    }
    const line = el('line', {
      x1: sx(marker.x),
      x2: sx(marker.x),
      y1: m.t,
      y2: height - m.b,
      class: 'ktrain-ChartMarker'
    });
    line.appendChild(el('title', {}, marker.text));
    line.dataset.text = marker.text;
    svg.appendChild(line);
  }
  panel.traces.forEach(trace => {
    const points = trace.x
      .map((x, k) => `${sx(x).toFixed(1)},${sy(trace.y[k]).toFixed(1)}`)
      .join(' ');
    const line = el('polyline', {
      points,
      fill: 'none',
      stroke: trace.colour,
      'stroke-width': 1.5
    });
    line.dataset.label = trace.label;
    line.dataset.points = String(trace.x.length);
    svg.appendChild(line);
  });
  box.appendChild(svg);
  const legend = document.createElement('div');
  legend.className = 'ktrain-ChartLegend'; // one legend per chart, under it
  panel.traces.forEach(trace => {
    const item = document.createElement('span');
    item.style.color = trace.colour;
    item.textContent = `— ${trace.label}`;
    legend.appendChild(item);
  });
  box.appendChild(legend);
  return box;
}

/** Metrics reported once (a run's closing train_runtime...): values in a row, not charts. */
export function renderValues(values: SummaryPayload[]): HTMLElement {
  const box = document.createElement('div');
  box.className = 'ktrain-Values';
  for (const v of values) {
    const item = document.createElement('span');
    item.className = 'ktrain-Value';
    item.dataset.metric = v.name;
    item.title = `reported once, by rank ${v.rank}`;
    const name = document.createElement('b');
    name.textContent = v.name;
    item.append(name, ` ${v.text}`);
    box.appendChild(item);
  }
  return box;
}
