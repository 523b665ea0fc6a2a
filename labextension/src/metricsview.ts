/**
 * A job tab's plots: the metric and GPU charts, the values reported once, and the notices of
 * what the job's records said happened ("resumed from step 40 (checkpoint step-40.pt)"). Drawn
 * only when the payload's version changed, so a hover on a chart survives the polls.
 */
import { renderChart, renderValues } from './chart';
import { MetricsPayload } from './payloads';

/** The width a chart in ``box`` is drawn at: the box's, up to ``most`` (``most`` while the
 * box is not laid out: a hidden tab). A chart is never wider than its container. */
export function fitWidth(box: HTMLElement, most = 520): number {
  const room = box.clientWidth;
  return room > 0 ? Math.min(most, room) : most;
}

export class MetricsView {
  readonly notices = document.createElement('div');
  readonly values = document.createElement('div');
  readonly charts = document.createElement('div');
  private version = -1;
  private payload: MetricsPayload | null = null;
  private width = 0;
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
    this.notices.replaceChildren(
      ...payload.notices.map(text => {
        const line = document.createElement('div');
        line.className = 'ktrain-Notice';
        line.textContent = `↻ ${text}`;
        return line;
      })
    );
    this.drawCharts(payload);
  }

  private drawCharts(payload: MetricsPayload): void {
    this.payload = payload;
    this.width = fitWidth(this.charts);
    this.charts.replaceChildren(...payload.panels.map(p => renderChart(p, this.width)));
  }

  dispose(): void {
    this.resize.disconnect();
  }
}
