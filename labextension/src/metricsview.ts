/**
 * A job tab's plots: the metric and GPU charts (from 8 GPUs up a heatmap of the GPUs), the values reported once, and the notices of
 * what the job's records said happened ("resumed from step 40 (checkpoint step-40.pt)"). Drawn
 * only when the payload's version changed, so a hover on a chart survives the polls.
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import { API_ROOT } from './api';
import { renderChart, renderValues } from './chart';
import { renderHeatmap } from './heatmap';
import { MetricsPayload, ProfileShown } from './payloads';

/** The width a chart in ``box`` is drawn at: the box's, up to ``most`` (``most`` while the
 * box is not laid out: a hidden tab). A chart is never wider than its container. */
export function fitWidth(box: HTMLElement, most = 520): number {
  const room = box.clientWidth;
  return room > 0 ? Math.min(most, room) : most;
}

/** The job's last `%ktrain profile`, folded: its table, and a download link per rank's
 * Chrome trace (served from the job store). */
function renderProfile(profile: ProfileShown): HTMLElement {
  const details = document.createElement('details');
  details.className = 'ktrain-Profile';
  const summary = document.createElement('summary');
  const when = new Date(profile.t * 1000).toLocaleTimeString();
  summary.textContent = `last profile (%ktrain profile, ${when})`;
  const pre = document.createElement('pre');
  pre.textContent = profile.text;
  const links = document.createElement('div');
  const base = ServerConnection.makeSettings().baseUrl;
  for (const trace of profile.traces) {
    const a = document.createElement('a');
    a.className = 'ktrain-TraceLink';
    a.href = URLExt.join(base, API_ROOT, trace.path);
    a.download = '';
    a.textContent = `Chrome trace, rank ${trace.rank}`;
    links.append(a, ' ');
  }
  details.append(summary, links, pre);
  return details;
}

export class MetricsView {
  readonly notices = document.createElement('div');
  readonly values = document.createElement('div');
  readonly charts = document.createElement('div');
  private version = -1;
  private payload: MetricsPayload | null = null;
  private width = 0;
  private heatField: string | null = null; // the heatmap's field the user chose
  // the charts are as wide as the tab: drawn again when its width changes
  private resize = new ResizeObserver(() => {
    if (this.payload && fitWidth(this.charts) !== this.width) {
      this.drawCharts(this.payload);
    }
  });

  constructor() {
    this.notices.className = 'ktrain-Notices';
    this.values.className = 'ktrain-ValuesBox';
    this.charts.className = 'ktrain-Charts';
    this.resize.observe(this.charts);
  }

  render(payload: MetricsPayload): void {
    if (payload.version === this.version) {
      return; // nothing new: keep the charts (and the user's hover) as they are
    }
    this.version = payload.version;
    this.values.replaceChildren(renderValues(payload.values));
    const line = (className: string, text: string): HTMLElement => {
      const div = document.createElement('div');
      div.className = className;
      div.textContent = text;
      return div;
    };
    const shown = [
      ...(payload.warnings ?? []).map(text => line('ktrain-Warning', `⚠ ${text}`)),
      ...payload.notices.map(text => line('ktrain-Notice', `↻ ${text}`))
    ];
    if (payload.stacks) {
      // the stacks taken when a rank was named hung, folded: one click shows them
      const details = document.createElement('details');
      details.className = 'ktrain-HangStacks';
      const summary = document.createElement('summary');
      summary.textContent = 'stacks taken when it was named hung';
      const pre = document.createElement('pre');
      pre.textContent = payload.stacks;
      details.append(summary, pre);
      shown.push(details);
    }
    if (payload.profile) {
      shown.push(renderProfile(payload.profile));
    }
    // what the user unfolded stays unfolded through the polls that redraw it
    const open = new Set(
      Array.from(this.notices.querySelectorAll('details[open]'), d => d.className)
    );
    for (const node of shown) {
      if (node instanceof HTMLDetailsElement && open.has(node.className)) {
        node.open = true;
      }
    }
    this.notices.replaceChildren(...shown);
    this.drawCharts(payload);
  }

  private drawCharts(payload: MetricsPayload): void {
    const began = performance.now();
    this.payload = payload;
    this.width = fitWidth(this.charts);
    // from 8 GPUs up the GPUs are one heatmap, above the charts
    const heatmaps = payload.heatmaps ?? [];
    const heat = heatmaps.length
      ? [
          renderHeatmap(heatmaps, this.heatField, field => {
            this.heatField = field;
            this.drawCharts(payload);
          })
        ]
      : [];
    this.charts.replaceChildren(...heat, ...payload.panels.map(p => renderChart(p, this.width)));
    // each redraw on the page's timeline (the browser's performance tools; the tests)
    performance.measure('ktrain-panel-redraw', { start: began });
  }

  dispose(): void {
    this.resize.disconnect();
  }
}
