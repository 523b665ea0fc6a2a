/**
 * A job tab's status: the header line (state, backend, warm runs, progress, why), why a failed
 * job failed (shown first), and one line per replica (phase, exit code, restarts). The header
 * is drawn from a summary, whoever polled it (this tab or the job list, through progress.ts);
 * the failure and the replicas from this tab's own detail poll.
 */
import { stateColour } from './colours';
import { JobDetail, JobSummary } from './payloads';

export class JobStatusView {
  readonly header = document.createElement('div');
  readonly failure = document.createElement('pre');
  readonly replicas = document.createElement('div');

  constructor() {
    this.header.className = 'ktrain-JobHeader';
    this.failure.className = 'ktrain-Failure';
    this.failure.hidden = true;
    this.replicas.className = 'ktrain-Replicas';
  }

  /** State and progress: from this tab's poll or the job list's, whichever came last; worded
   * by the server as the cell and the widget word them (a warm job's runs too). */
  renderHeader(d: JobSummary): void {
    this.header.dataset.state = d.state;
    const why = [d.reason, d.message].filter(Boolean).join(': ');
    const warm = d.warm ? ` · ${d.warm.short}` : '';
    const progress =
      d.progress && !(d.warm && d.warm.active === null) ? ` · ${d.progress.text}` : '';
    const tail = `${warm}${progress}${why ? ` (${why})` : ''}`;
    // a cluster job whose objects are gone: what is shown is its history (the job store)
    const gone = d.history ? ' · deleted (from history)' : '';
    this.header.textContent = `● ${d.name} · ${d.backend} · ${d.state}${gone}${tail}`;
    this.header.className = `ktrain-JobHeader ktrain-State-${d.state}`;
    this.header.style.color = stateColour(d.state);
  }

  /** Why it failed (hidden while there is no failure) and its replicas. */
  renderDetail(d: JobDetail): void {
    this.failure.hidden = !d.failure;
    this.failure.textContent = d.failure ?? '';
    // a restart (a fault the job survived) is said where the replica is: how often, and why
    this.replicas.textContent = d.replicas
      .map(r => {
        const exit = r.exit_code === null ? '' : ` (exit ${r.exit_code})`;
        const again = r.restart_text ? ` · ${r.restart_text}` : '';
        return `${r.name}: ${r.phase}${exit}${again}`;
      })
      .join('   ');
  }
}
