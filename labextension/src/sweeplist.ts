/**
 * The panel's "Sweeps" section: one row per sweep of the job store (name, state, trials done
 * of those asked, the best so far) from GET /ktrain/api/sweeps, read with the job list.
 * Clicking a row opens the sweep's tab (`ktrain:open-sweep`, sweepview.ts).
 */
import { api, KtrainApiError } from './api';
import { SweepSummary } from './payloads';

export class SweepList {
  readonly node = document.createElement('div');
  private readonly table = document.createElement('table');
  private readonly status = document.createElement('div');
  private inFlight = false;

  constructor(private openSweep: (name: string) => void) {
    this.node.className = 'ktrain-Sweeps';
    const heading = document.createElement('div');
    heading.className = 'ktrain-PanelTitle ktrain-SweepsTitle';
    heading.textContent = 'Sweeps';
    this.status.className = 'ktrain-Error ktrain-SweepsStatus';
    this.table.className = 'ktrain-JobTable ktrain-SweepList';
    this.node.append(heading, this.status, this.table);
    this.node.hidden = true; // until there is a sweep
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
    } catch (error) {
      // shown once sweeps were listed; before, the job list above says what the server said
      this.status.textContent = error instanceof KtrainApiError ? error.message : String(error);
    } finally {
      this.inFlight = false;
    }
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
