/**
 * The comparison tab: several jobs' curves of one metric overlaid (one chart, chart.ts), the
 * metric picked from every metric the jobs reported, and beside it a table of the flags and
 * constants whose values differ between the jobs (`%ktrain compare`'s data, from
 * GET /ktrain/api/compare). The jobs are ended or running: it is read once, and again on the
 * refresh button or when another metric is picked.
 */
import { Widget } from '@lumino/widgets';

import { api, KtrainApiError } from './api';
import { renderChart } from './chart';
import { ComparePayload } from './payloads';

export class CompareView extends Widget {
  private metric: string | null = null;
  private readonly picker = document.createElement('select');
  private readonly chart = document.createElement('div');
  private readonly table = document.createElement('table');
  private readonly errorBox = document.createElement('div');

  constructor(
    readonly jobs: string[],
    readonly backend: string
  ) {
    super();
    this.addClass('ktrain-CompareView');
    this.id = `ktrain-compare-${backend}-${jobs.join('-')}`;
    this.title.label = `ktrain: ${jobs.join(' vs ')}`;
    this.title.closable = true;
    const bar = document.createElement('div');
    bar.className = 'ktrain-JobBar';
    const label = document.createElement('label');
    label.textContent = 'metric ';
    this.picker.className = 'ktrain-CompareMetric';
    this.picker.onchange = () => {
      this.metric = this.picker.value;
      void this.refresh();
    };
    label.appendChild(this.picker);
    const refresh = document.createElement('button');
    refresh.className = 'jp-Button ktrain-Refresh';
    refresh.textContent = '⟳ Refresh';
    refresh.onclick = () => void this.refresh();
    bar.append(label, refresh);
    this.errorBox.className = 'ktrain-Error';
    this.chart.className = 'ktrain-CompareChart';
    this.table.className = 'ktrain-CompareParams';
    const body = document.createElement('div');
    body.className = 'ktrain-CompareBody';
    body.append(this.chart, this.table);
    this.node.append(bar, this.errorBox, body);
  }

  protected onAfterAttach(): void {
    void this.refresh();
  }

  async refresh(): Promise<void> {
    try {
      this.render(await api.compare(this.jobs, this.metric, this.backend));
      this.errorBox.textContent = '';
    } catch (error) {
      this.errorBox.textContent = error instanceof KtrainApiError ? error.message : String(error);
    }
  }

  private render(p: ComparePayload): void {
    this.metric = p.metric;
    this.picker.replaceChildren(
      ...p.metrics.map(m => {
        const option = document.createElement('option');
        option.value = m;
        option.textContent = m;
        option.selected = m === p.metric;
        return option;
      })
    );
    const traces = p.curves.map(c => ({ label: c.job, colour: c.colour, x: c.x, y: c.y }));
    this.chart.replaceChildren(
      renderChart(
        {
          key: `compare-${p.metric}`,
          name: p.metric,
          title: `${p.metric} across ${p.jobs.join(', ')}`,
          x_title: 'step',
          traces,
          markers: []
        },
        560,
        300
      )
    );
    this.table.replaceChildren(this.row('th', '', p.jobs));
    const last = new Map(p.curves.map(c => [c.job, c.last]));
    const lastText = (job: string) => {
      const v = last.get(job);
      return v === null || v === undefined ? '—' : String(Number(v.toPrecision(6)));
    };
    this.table.appendChild(this.row('td', `${p.metric} (last)`, p.jobs.map(lastText)));
    for (const param of p.differ) {
      const tr = this.row(
        'td',
        param.name,
        p.jobs.map(j => param.values[j] ?? '—')
      );
      tr.className = 'ktrain-CompareParam';
      tr.dataset.param = param.name;
      this.table.appendChild(tr);
    }
    if (!p.differ.length) {
      const tr = this.row('td', "the jobs' flags and constants are the same", []);
      this.table.appendChild(tr);
    }
  }

  private row(cell: 'th' | 'td', head: string, values: string[]): HTMLElement {
    const tr = document.createElement('tr');
    for (const text of [head, ...values]) {
      const td = document.createElement(cell);
      td.textContent = text;
      tr.appendChild(td);
    }
    return tr;
  }
}
