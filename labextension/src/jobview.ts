/**
 * A job's main-area tab, put together from its parts: the status (jobstatus.ts: header,
 * failure, replicas), Cancel and Stacks (jobactions.ts), the log pane (logview.ts) and the plots
 * (metricsview.ts). This class owns the polling: every LOG_POLL_MS until the job ended, new
 * log lines and, in the same poll, the metrics (the server feeds its per-job model only the new
 * lines, so the charts and the log are of the same moment); the status is read on its own,
 * every STATUS_POLL_MS, so a slow log read cannot hold the header back. The header's state and progress
 * are shared with the job list (progress.ts). Polling pauses while the tab is hidden.
 */
import { PolledWidget } from './polled';

import { api, KtrainApiError } from './api';
import { CancelButton, StacksButton } from './jobactions';
import { JobStatusView } from './jobstatus';
import { LogView } from './logview';
import { MetricsView } from './metricsview';
import { JobDetail } from './payloads';
import { publish, subscribe } from './progress';

export const LOG_POLL_MS = 1000;
export const METRIC_POLL_MS = LOG_POLL_MS;
/** The header's state and progress: read this often while the job runs, so the tab trails
 * the notebook's widget (which follows the job's log) by well under 0.6 s. A status read is
 * small (the job's state file, or its objects' cached watch on a cluster). */
export const STATUS_POLL_MS = 250;

export class JobView extends PolledWidget {
  private status = new JobStatusView();
  private cancelButton = new CancelButton(() => void this.cancel());
  private stacksButton = new StacksButton(() => void this.takeStacks());
  private logs: LogView;
  private metrics = new MetricsView();
  private errorBox = document.createElement('div');
  private terminal = false;
  private timer: number | null = null;
  private statusTimer: number | null = null;
  private statusChain = 0; // which start() the status reads belong to (a stop ends them)
  private lastMetrics = 0;
  private busy = false;
  private statusBusy = false;
  private unsubscribe: () => void;

  constructor(readonly jobName: string) {
    super();
    this.addClass('ktrain-JobView');
    this.id = `ktrain-job-${jobName}`;
    this.title.label = `ktrain: ${jobName}`;
    this.title.closable = true;
    this.logs = new LogView(jobName, () => void this.tick());
    this.errorBox.className = 'ktrain-Error';
    this.unsubscribe = subscribe(job => {
      if (job.name === this.jobName) {
        this.status.renderHeader(job);
      }
    });
    const top = document.createElement('div');
    top.className = 'ktrain-JobBar';
    top.append(this.status.header, this.stacksButton.node, this.cancelButton.node);
    // a failed job's tab opens with why it failed, before anything else
    this.node.append(
      top,
      this.status.failure,
      this.errorBox,
      this.stacksButton.box,
      this.status.replicas,
      this.metrics.notices,
      this.logs.controls,
      this.logs.box,
      this.metrics.values,
      this.metrics.charts
    );
  }

  private async cancel(): Promise<void> {
    this.cancelButton.pending();
    try {
      this.renderDetail(await api.cancel(this.jobName));
    } catch (error) {
      this.showError(error);
      this.cancelButton.failed();
    }
    void this.tick();
  }

  private async takeStacks(): Promise<void> {
    this.stacksButton.pending();
    try {
      this.stacksButton.shown(await api.stacks(this.jobName));
    } catch (error) {
      this.stacksButton.failed(error instanceof KtrainApiError ? error.message : String(error));
    }
  }

  private showError(error: unknown): void {
    this.errorBox.textContent = error instanceof KtrainApiError ? error.message : String(error);
  }

  private renderDetail(d: JobDetail): void {
    this.terminal = d.terminal;
    publish(d); // the job list shows the same progress (the header is drawn through it)
    this.cancelButton.update(d);
    this.stacksButton.update(d);
    this.status.renderDetail(d);
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
      await this.logs.read();
      const now = Date.now();
      if (now - this.lastMetrics >= METRIC_POLL_MS || this.terminal) {
        if (!(this.terminal && this.lastMetrics < 0)) {
          this.lastMetrics = this.terminal ? -1 : now;
          const metrics = await api.metrics(this.jobName);
          this.metrics.render(metrics);
          this.logs.setRanks(metrics); // a big job's log starts with the ranks that matter
        }
      }
      this.errorBox.textContent = '';
    } catch (error) {
      this.showError(error);
    } finally {
      this.busy = false;
    }
  }

  protected start(): void {
    if (this.timer === null) {
      void this.tick();
      this.timer = window.setInterval(() => {
        if (this.terminal && this.logs.done && this.lastMetrics < 0) {
          return; // ended and fully read: nothing will change
        }
        void this.tick();
      }, LOG_POLL_MS);
      this.watchStatus(++this.statusChain);
    }
  }

  /** The status again STATUS_POLL_MS after the last read began (at once if that read took
   * longer), one read at a time, until the job ended or the tab is hidden. */
  private watchStatus(chain: number): void {
    const began = Date.now();
    void this.pollStatus().then(() => {
      if (chain !== this.statusChain || this.terminal) {
        return;
      }
      const wait = Math.max(0, STATUS_POLL_MS - (Date.now() - began));
      this.statusTimer = window.setTimeout(() => this.watchStatus(chain), wait);
    });
  }

  protected stop(): void {
    if (this.timer !== null) {
      window.clearInterval(this.timer);
      this.timer = null;
    }
    this.statusChain += 1;
    if (this.statusTimer !== null) {
      window.clearTimeout(this.statusTimer);
      this.statusTimer = null;
    }
  }

  dispose(): void {
    this.unsubscribe();
    this.metrics.dispose();
    super.dispose();
  }
}
