/**
 * The panel's "Sweeps" section: one row per sweep of the job store (name, state, trials done
 * of those asked, the best so far) from GET /ktrain/api/sweeps, read with the job list, and
 * every SWEEP_POLL_MS of its own while a sweep runs and the panel is shown (a trial of a few
 * seconds ends between two reads of the list); a sweep's open tab (sweepview.ts), which polls
 * its sweep every second, redraws its row at once (progress.ts). Clicking a row opens the
 * sweep's tab (`ktrain:open-sweep`).
 */
import { api, KtrainApiError } from './api';
import { SweepSummary } from './payloads';
import { subscribeSweeps } from './progress';

export const SWEEP_LIST_POLL_MS = 1000;

export class SweepList {
  readonly node = document.createElement('div');
  private readonly table = document.createElement('table');
  private readonly status = document.createElement('div');
  private inFlight = false;
  private again: number | null = null; // the next read while a sweep runs
  private readonly unsubscribe: () => void;

  constructor(
    private openSweep: (name: string) => void,
    private shown: () => boolean = () => true
  ) {
    this.node.className = 'ktrain-Sweeps';
    const heading = document.createElement('div');
    heading.className = 'ktrain-PanelTitle ktrain-SweepsTitle';
    heading.textContent = 'Sweeps';
    this.status.className = 'ktrain-Error ktrain-SweepsStatus';
    this.table.className = 'ktrain-JobTable ktrain-SweepList';
    this.node.append(heading, this.status, this.table);
    this.node.hidden = true; // until there is a sweep
    this.unsubscribe = subscribeSweeps(sweep => this.updateRow(sweep));
  }

  /** Redraw the row of ``sweep`` from a fresher summary (its tab's poll). */
  private updateRow(sweep: SweepSummary): void {
    const old = Array.from(this.table.querySelectorAll<HTMLElement>('.ktrain-SweepListRow')).find(
      r => r.dataset.name === sweep.name
    );
    old?.replaceWith(this.row(sweep));
  }

  dispose(): void {
    this.unsubscribe();
    if (this.again !== null) {
      window.clearTimeout(this.again);
      this.again = null;
    }
  }

  async refresh(): Promise<void> {
    if (this.inFlight) {
      return;
    }
    this.inFlight = true;
    try {
      const payload = await api.sweeps();
      this.status.textContent = '';
      this.node.hidden = !payload.sweeps.length;
      this.table.replaceChildren(this.headerRow(), ...payload.sweeps.map(s => this.row(s)));
      if (payload.sweeps.some(s => s.state === 'Running')) {
        this.readAgain();
      }
    } catch (error) {
      // shown once sweeps were listed; before, the job list above says what the server said
      this.status.textContent = error instanceof KtrainApiError ? error.message : String(error);
    } finally {
      this.inFlight = false;
    }
  }

  /** Read the list again soon, while a sweep runs and the panel is shown. */
  private readAgain(): void {
    if (this.again !== null) {
      return;
    }
    this.again = window.setTimeout(() => {
      this.again = null;
      if (this.shown()) {
        void this.refresh();
      }
    }, SWEEP_LIST_POLL_MS);
  }

  private headerRow(): HTMLElement {
    const tr = document.createElement('tr');
    for (const h of ['name', 'trials', 'state', 'best']) {
      const th = document.createElement('th');
      th.textContent = h;
      th.className = `ktrain-Col-${h}`;
      tr.appendChild(th);
    }
    return tr;
  }

  private row(sweep: SweepSummary): HTMLElement {
    const tr = document.createElement('tr');
    tr.className = 'ktrain-SweepListRow';
    tr.dataset.name = sweep.name;
    tr.dataset.state = sweep.state;
    tr.title = `${sweep.name} (${sweep.objective}): best ${sweep.best_text}`;
    const best =
      sweep.best_objective === null ? '—' : String(Number(sweep.best_objective.toPrecision(4)));
    const cells = [sweep.name, `${sweep.done}/${sweep.total}`, sweep.state, best];
    cells.forEach((text, i) => {
      const td = document.createElement('td');
      td.textContent = text;
      if (i === 0) {
        td.className = 'ktrain-Name';
      } else if (i === 1) {
        td.className = 'ktrain-SweepDone';
      } else if (i === 2) {
        td.className = 'ktrain-State';
        td.style.color = sweep.state_colour;
      } else if (i === 3) {
        td.className = 'ktrain-SweepBest';
      }
      tr.appendChild(td);
    });
    tr.onclick = () => this.openSweep(sweep.name);
    return tr;
  }
}
