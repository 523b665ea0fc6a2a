/**
 * A job's main-area tab: header (state, replicas), Cancel, rank selector + filter, the log
 * pane, the metric charts and the values reported once. Logs are read incrementally (GET
 * .../logs?offset=, the previous response's next_offset) every LOG_POLL_MS until the job
 * ended; changing the rank or filter starts again from offset "" (the server filters).
 * Metrics come in the same poll (the server feeds its per-job model only the new lines), so
 * the header's progress and the charts are of the same moment; they are redrawn only when
 * their version changed. The header's state and progress are shared with the job list
 * (progress.ts). Polling pauses while the tab is hidden.
 */
import { Widget } from '@lumino/widgets';

import { api, KtrainApiError } from './api';
import { renderChart, renderValues } from './chart';
import { rankColour, stateColour } from './colours';
import { JobDetail, JobSummary, MetricsPayload } from './payloads';
import { publish, subscribe } from './progress';

export const LOG_POLL_MS = 1000;
export const METRIC_POLL_MS = LOG_POLL_MS;
const MAX_SHOWN_LINES = 20000;

export class JobView extends Widget {
  private header = document.createElement('div');
  private replicas = document.createElement('div');
  private cancelButton = document.createElement('button');
  private rankSelect = document.createElement('select');
  private grepInput = document.createElement('input');
  private logBox = document.createElement('pre');
  private values = document.createElement('div');
  private notices = document.createElement('div');
  private charts = document.createElement('div');
  private errorBox = document.createElement('div');
  private failureBox = document.createElement('pre');
  private offset = '';
  private ranks = new Set<number>();
  private shown = 0;
  private terminal = false;
  private logsDone = false;
  private timer: number | null = null;
  private lastMetrics = 0;
  private metricsVersion = -1;
  private busy = false;
  private statusBusy = false;
  private generation = 0;
  private unsubscribe: () => void;

  constructor(readonly jobName: string) {
    super();
    this.addClass('ktrain-JobView');
    this.id = `ktrain-job-${jobName}`;
    this.title.label = `ktrain: ${jobName}`;
    this.title.closable = true;
    this.header.className = 'ktrain-JobHeader';
    this.replicas.className = 'ktrain-Replicas';
    this.errorBox.className = 'ktrain-Error';
    this.failureBox.className = 'ktrain-Failure';
    this.failureBox.hidden = true;
    this.cancelButton.className = 'jp-Button ktrain-Cancel';
    this.cancelButton.textContent = 'Cancel';
    this.cancelButton.onclick = () => void this.cancel();
    this.rankSelect.className = 'ktrain-RankSelect';
    this.rankSelect.add(new Option('all ranks', ''));
    this.rankSelect.onchange = () => this.restartLogs();
    this.grepInput.className = 'ktrain-Grep';
    this.grepInput.placeholder = 'filter lines…';
    this.grepInput.onchange = () => this.restartLogs();
    this.logBox.className = 'ktrain-Logs';
    this.charts.className = 'ktrain-Charts';
    this.values.className = 'ktrain-ValuesBox';
    this.notices.className = 'ktrain-Notices';
    this.unsubscribe = subscribe(job => {
      if (job.name === this.jobName) {
        this.renderHeader(job);
      }
    });
    const top = document.createElement('div');
    top.className = 'ktrain-JobBar';
    top.append(this.header, this.cancelButton);
    const controls = document.createElement('div');
    controls.className = 'ktrain-LogControls';
    controls.append('Show ', this.rankSelect, this.grepInput);
    // a failed job's tab opens with why it failed, before anything else
    this.node.append(
      top,
      this.failureBox,
      this.errorBox,
      this.replicas,
      this.notices,
      controls,
      this.logBox,
      this.values,
      this.charts
    );
  }

  private restartLogs(): void {
    this.generation += 1;
    this.offset = '';
    this.shown = 0;
    this.logsDone = false;
    this.logBox.textContent = '';
    void this.tick();
  }

  private async cancel(): Promise<void> {
    this.cancelButton.disabled = true;
    this.cancelButton.textContent = 'Cancelling…';
    try {
      this.renderDetail(await api.cancel(this.jobName));
    } catch (error) {
      this.showError(error);
      this.cancelButton.disabled = false;
      this.cancelButton.textContent = 'Cancel';
    }
    void this.tick();
  }

  private showError(error: unknown): void {
    this.errorBox.textContent = error instanceof KtrainApiError ? error.message : String(error);
  }

  /** State and progress: from this tab's poll or the job list's, whichever came last; worded
   * by the server as the cell and the widget word them (a warm job's runs too). */
  private renderHeader(d: JobSummary): void {
    this.header.dataset.state = d.state;
    const why = [d.reason, d.message].filter(Boolean).join(': ');
    const warm = d.warm ? ` · ${d.warm.short}` : '';
    const progress =
      d.progress && !(d.warm && d.warm.active === null) ? ` · ${d.progress.text}` : '';
    const tail = `${warm}${progress}${why ? ` (${why})` : ''}`;
    this.header.textContent = `● ${d.name} · ${d.backend} · ${d.state}${tail}`;
    this.header.className = `ktrain-JobHeader ktrain-State-${d.state}`;
    this.header.style.color = stateColour(d.state);
  }

  private renderDetail(d: JobDetail): void {
    this.terminal = d.terminal;
    publish(d); // the job list shows the same progress (renderHeader runs through it)
    // the button says what is true: Cancel while it runs, Cancelled (disabled) at the end
    // of a cancelled job, a disabled Cancel at any other end
    if (d.terminal) {
      this.cancelButton.disabled = true;
      this.cancelButton.textContent = d.state === 'Cancelled' ? 'Cancelled' : 'Cancel';
    } else if (this.cancelButton.textContent !== 'Cancelling…') {
      this.cancelButton.disabled = false;
    }
    this.failureBox.hidden = !d.failure;
    this.failureBox.textContent = d.failure ?? '';
    // a restart (a fault the job survived) is said where the replica is: how often, and why
    this.replicas.textContent = d.replicas
      .map(r => {
        const exit = r.exit_code === null ? '' : ` (exit ${r.exit_code})`;
        const again = r.restart_text ? ` · ${r.restart_text}` : '';
        return `${r.name}: ${r.phase}${exit}${again}`;
      })
      .join('   ');
  }

  /** The status on its own: a slow log or metrics read must not hold the header back (the
   * widget in the notebook shows the same job; this header trails it by one poll at most). */
  private async pollStatus(): Promise<void> {
    if (this.statusBusy) {
      return;
    }
    this.statusBusy = true;
    try {
      this.renderDetail(await api.job(this.jobName));
    } catch (error) {
      this.showError(error);
    } finally {
      this.statusBusy = false;
    }
  }

  /** One poll: new log lines (all pages), metrics when due (the status: pollStatus). */
  async tick(): Promise<void> {
    void this.pollStatus();
    if (this.busy) {
      return;
    }
    this.busy = true;
    try {
      await this.readLogs();
      const now = Date.now();
      if (now - this.lastMetrics >= METRIC_POLL_MS || this.terminal) {
        if (!(this.terminal && this.lastMetrics < 0)) {
          this.lastMetrics = this.terminal ? -1 : now;
          this.renderCharts(await api.metrics(this.jobName));
        }
      }
      this.errorBox.textContent = '';
    } catch (error) {
      this.showError(error);
    } finally {
      this.busy = false;
    }
  }

  private async readLogs(): Promise<void> {
    const generation = this.generation;
    const rank = this.rankSelect.value === '' ? null : Number(this.rankSelect.value);
    for (let page = 0; page < 20 && !this.logsDone; page++) {
      const r = await api.logs(this.jobName, {
        rank,
        grep: this.grepInput.value,
        offset: this.offset
      });
      if (generation !== this.generation) {
        return; // the rank or filter changed meanwhile: that read starts over
      }
      this.offset = r.next_offset;
      this.append(
        r.lines.map(l => {
          const row = document.createElement('span');
          const label = document.createElement('span');
          label.className = 'ktrain-LogLabel';
          label.style.color = rankColour(l.rank);
          label.textContent = `[${l.label}]`;
          row.append(label, ` ${l.text}\n`);
          return row;
        })
      );
      for (const l of r.lines) {
        this.noteRank(l.rank);
      }
      this.logsDone = r.terminal;
      if (!r.more) {
        break;
      }
    }
  }

  private noteRank(rank: number | null): void {
    if (rank === null || this.ranks.has(rank)) {
      return;
    }
    this.ranks.add(rank);
    const sorted = Array.from(this.ranks).sort((a, b) => a - b);
    const value = this.rankSelect.value;
    this.rankSelect.replaceChildren(
      new Option('all ranks', ''),
      ...sorted.map(r => new Option(`rank ${r}`, String(r)))
    );
    this.rankSelect.value = value;
  }

  private append(lines: HTMLElement[]): void {
    if (!lines.length) {
      return;
    }
    const pinned = this.logBox.scrollTop + this.logBox.clientHeight >= this.logBox.scrollHeight - 4;
    this.logBox.append(...lines);
    this.shown += lines.length;
    while (this.shown > MAX_SHOWN_LINES && this.logBox.firstChild) {
      this.logBox.firstChild.remove();
      this.shown -= 1;
    }
    if (pinned) {
      this.logBox.scrollTop = this.logBox.scrollHeight;
    }
  }

  private renderCharts(payload: MetricsPayload): void {
    if (payload.version === this.metricsVersion) {
      return; // nothing new: keep the charts (and the user's hover) as they are
    }
    this.metricsVersion = payload.version;
    this.values.replaceChildren(renderValues(payload.values));
    // what the job's records said happened: "resumed from step 40 (checkpoint step-40.pt)"
    this.notices.replaceChildren(
      ...payload.notices.map(text => {
        const line = document.createElement('div');
        line.className = 'ktrain-Notice';
        line.textContent = `↻ ${text}`;
        return line;
      })
    );
    this.charts.replaceChildren(...payload.panels.map(p => renderChart(p)));
  }

  private start(): void {
    if (this.timer === null) {
      void this.tick();
      this.timer = window.setInterval(() => {
        if (this.terminal && this.logsDone && this.lastMetrics < 0) {
          return; // ended and fully read: nothing will change
        }
        void this.tick();
      }, LOG_POLL_MS);
    }
  }

  private stop(): void {
    if (this.timer !== null) {
      window.clearInterval(this.timer);
      this.timer = null;
    }
  }

  protected onAfterShow(): void {
    this.start();
  }

  protected onAfterAttach(): void {
    if (this.isVisible) {
      this.start();
    }
  }

  protected onBeforeHide(): void {
    this.stop();
  }

  protected onBeforeDetach(): void {
    this.stop();
  }

  dispose(): void {
    this.stop();
    this.unsubscribe();
    super.dispose();
  }
}
