/**
 * A sweep's main-area tab (`ktrain:open-sweep`): its header (state, trials done, the best so
 * far), the trials' table (each value, state, objective so far, job and run; the best row
 * marked; a failed or pruned trial's reason) and every trial's objective over steps in one
 * chart (chart.ts), from GET /ktrain/api/sweeps/NAME: the view the cell's widget draws, from
 * the same record. Polled every POLL_MS while the sweep runs and the tab is shown. Clicking a
 * trial's row opens its job's tab (`ktrain:open-job`).
 */
import { PolledWidget } from './polled';

import { api, KtrainApiError } from './api';
import { renderChart } from './chart';
import { SweepDetail, SweepRowPayload } from './payloads';
import { publishSweep } from './progress';

export const SWEEP_POLL_MS = 1000;

export class SweepView extends PolledWidget {
  private readonly header = document.createElement('div');
  private readonly table = document.createElement('table');
  private readonly chart = document.createElement('div');
  private readonly errorBox = document.createElement('div');
  private timer: number | null = null;
  private busy = false;
  private running = true;

  constructor(
    readonly sweepName: string,
    private openJob: (name: string) => void
  ) {
    super();
    this.addClass('ktrain-SweepView');
    this.id = `ktrain-sweep-${sweepName}`;
    this.title.label = `ktrain sweep: ${sweepName}`;
    this.title.closable = true;
    const bar = document.createElement('div');
    bar.className = 'ktrain-JobBar';
    this.header.className = 'ktrain-SweepHeader';
    const refresh = document.createElement('button');
    refresh.className = 'jp-Button ktrain-Refresh';
    refresh.textContent = '⟳ Refresh';
    refresh.onclick = () => void this.refresh();
    bar.append(this.header, refresh);
    this.errorBox.className = 'ktrain-Error';
    this.table.className = 'ktrain-SweepTable';
    this.chart.className = 'ktrain-SweepChart';
    this.node.append(bar, this.errorBox, this.table, this.chart);
  }

  async refresh(): Promise<void> {
    if (this.busy) {
      return;
    }
    this.busy = true;
    try {
      this.render(await api.sweep(this.sweepName));
      this.errorBox.textContent = '';
    } catch (error) {
      this.errorBox.textContent = error instanceof KtrainApiError ? error.message : String(error);
    } finally {
      this.busy = false;
    }
  }

  private render(d: SweepDetail): void {
    this.running = d.state === 'Running';
    publishSweep(d); // the panel's Sweeps row says the same at once
    this.header.dataset.state = d.state;
    const dot = document.createElement('b');
    dot.style.color = d.state_colour;
    dot.textContent = '● ';
    this.header.replaceChildren(dot, d.header);
    const heads = ['trial', ...d.names, 'state', `${d.objective} so far`, 'job', ''];
    const head = document.createElement('tr');
    for (const h of heads) {
      const th = document.createElement('th');
      th.textContent = h;
      head.appendChild(th);
    }
    this.table.replaceChildren(head, ...d.rows.map(r => this.row(r)));
    const traces = d.curves.map(c => ({ label: c.label, colour: c.colour, x: c.x, y: c.y }));
    const width = Math.max(420, Math.min(900, this.node.clientWidth - 24));
    this.chart.replaceChildren(
      renderChart(
        {
          key: `sweep-${d.name}`,
          name: d.metric,
          title: `${d.metric} of every trial`,
          x_title: 'step',
          traces,
          markers: []
        },
        width,
        280,
        d.metric
      )
    );
  }

  private row(r: SweepRowPayload): HTMLElement {
    const tr = document.createElement('tr');
    tr.className = 'ktrain-SweepRow';
    tr.classList.toggle('ktrain-mod-best', r.best);
    tr.dataset.number = String(r.number);
    tr.dataset.state = r.state;
    tr.dataset.job = r.job;
    const swatch = document.createElement('span');
    swatch.style.color = r.colour;
    swatch.textContent = '■ ';
    const first = document.createElement('td');
    first.append(swatch, `${r.best ? '★ ' : ''}${r.number}`);
    tr.appendChild(first);
    const cells: [string, string][] = [
      ...r.params.map((v): [string, string] => [v, '']),
      [r.state, 'ktrain-SweepState'],
      [r.objective, 'ktrain-SweepObjective'],
      [r.where, 'ktrain-SweepWhere'],
      [r.reason, 'ktrain-SweepReason']
    ];
    for (const [text, cls] of cells) {
      const td = document.createElement('td');
      td.textContent = text;
      td.className = cls;
      if (cls === 'ktrain-SweepState') {
        td.style.color = r.state_colour;
      }
      tr.appendChild(td);
    }
    if (r.job) {
      tr.title = `Open trial ${r.number}'s job ${r.where}`;
      tr.onclick = () => this.openJob(r.job);
    }
    return tr;
  }

  protected start(): void {
    if (this.timer === null) {
      void this.refresh();
      this.timer = window.setInterval(() => {
        if (this.running && !document.hidden) {
          void this.refresh();
        }
      }, SWEEP_POLL_MS);
    }
  }

  protected stop(): void {
    if (this.timer !== null) {
      window.clearInterval(this.timer);
      this.timer = null;
    }
  }
}
