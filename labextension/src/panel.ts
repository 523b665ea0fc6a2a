/**
 * The "ktrain jobs" side panel: one row per job (name, backend, state, progress, age) from
 * GET /ktrain/api/jobs. It polls every POLL_MS only while it is visible (and once at once when
 * it becomes visible or the refresh button is pressed). Clicking a row runs `ktrain:open-job`;
 * ticking the boxes of two jobs or more of one backend and pressing Compare opens their
 * comparison (compareview.ts). A cluster job whose objects are gone is shown from its history,
 * marked `deleted`. Under the jobs, the "Sweeps" section (sweeplist.ts), read with them.
 */
import { Widget } from '@lumino/widgets';

import { api, KtrainApiError } from './api';
import { stateColour } from './colours';
import { JobSummary, JobsPayload } from './payloads';
import { publish, subscribe } from './progress';
import { SweepList } from './sweeplist';

export const POLL_MS = 3000;

const UNITS: [string, number][] = [
  ['d', 86400],
  ['h', 3600],
  ['m', 60],
  ['s', 1]
];

/** A length of time in its largest unit, rounded: `42s`, `3m`, `2h`, `4d` (`—` when unknown).
 * The browser's one duration wording, the server's `fmt_duration(seconds, 1)` (pod/progress.py). */
export function age(seconds: number | null): string {
  if (seconds === null) {
    return '—';
  }
  const s = Math.max(0, Math.round(seconds));
  const i = UNITS.findIndex(([, size]) => s >= size || size === 1);
  const rounded = Math.round(s / UNITS[i][1]) * UNITS[i][1];
  // rounding may carry into the next larger unit (59m 40s is 1h, not 60m)
  const [unit, size] = i > 0 && rounded >= UNITS[i - 1][1] ? UNITS[i - 1] : UNITS[i];
  return `${Math.round(rounded / size)}${unit}`;
}

/** The list's progress cell as the server words it (`42% · 1m 30s`, `42% · restarting`), `—`
 * before any report; a warm job: its runs, always said (`run 3 of a live job`, `warm · 2 runs ·
 * idle 1m`, `ended after 2 runs`: the server's words, so no idle clock counts on an ended job). */
export function progressText(job: JobSummary): string {
  const w = job.warm;
  if (w) {
    const running = w.active !== null && job.progress ? ` · ${job.progress.short}` : '';
    return `${w.short}${running}`;
  }
  return job.progress ? job.progress.short : '—';
}

export class JobsPanel extends Widget {
  private timer: number | null = null;
  private list: HTMLElement;
  private status: HTMLElement;
  private highlighted = '';
  private inFlight = false;
  private publishing = false;
  private unsubscribe: () => void;
  private selected = new Map<string, { name: string; backend: string }>();
  private compareButton = document.createElement('button');
  private sweeps: SweepList;

  constructor(
    private openJob: (name: string) => void,
    private openCompare: (names: string[], backend: string) => void = () => undefined,
    openSweep: (name: string) => void = () => undefined
  ) {
    super();
    this.id = 'ktrain-jobs-panel';
    this.addClass('ktrain-JobsPanel');
    this.title.caption = 'ktrain jobs';
    const bar = document.createElement('div');
    bar.className = 'ktrain-PanelBar';
    const heading = document.createElement('span');
    heading.className = 'ktrain-PanelTitle';
    heading.textContent = 'ktrain jobs';
    const refresh = document.createElement('button');
    refresh.className = 'jp-Button ktrain-Refresh';
    refresh.title = 'Refresh the job list';
    refresh.textContent = '⟳ Refresh';
    refresh.onclick = () => void this.refresh();
    this.compareButton.className = 'jp-Button ktrain-Compare';
    this.compareButton.title = 'Overlay a metric of the ticked jobs, with what differed';
    this.compareButton.onclick = () => this.compare();
    this.updateCompare();
    bar.append(heading, this.compareButton, refresh);
    this.status = document.createElement('div');
    this.status.className = 'ktrain-PanelStatus';
    this.list = document.createElement('table');
    this.list.className = 'ktrain-JobTable';
    this.sweeps = new SweepList(openSweep, () => this.isVisible && !document.hidden);
    this.node.append(bar, this.status, this.list, this.sweeps.node);
    // an open job tab polls its job every second: its figures replace the row's at once
    this.unsubscribe = subscribe(job => this.updateRow(job));
  }

  /** The ticked jobs, if two or more of one backend: their comparison tab. */
  private compare(): void {
    const jobs = Array.from(this.selected.values());
    const backends = new Set(jobs.map(j => j.backend));
    if (jobs.length < 2 || backends.size !== 1) {
      return;
    }
    this.openCompare(
      jobs.map(j => j.name),
      jobs[0].backend
    );
  }

  private updateCompare(): void {
    const jobs = Array.from(this.selected.values());
    const one = new Set(jobs.map(j => j.backend)).size === 1;
    this.compareButton.textContent = `Compare (${jobs.length})`;
    this.compareButton.disabled = jobs.length < 2 || !one;
    this.compareButton.title =
      jobs.length >= 2 && !one
        ? 'Compare jobs of one backend'
        : 'Tick two jobs or more: a metric of them overlaid, with what differed';
  }

  /** Redraw the row of ``job`` from a fresher summary (a job tab's poll). */
  private updateRow(job: JobSummary): void {
    if (this.publishing) {
      return; // our own list, drawn already
    }
    const old = Array.from(this.list.querySelectorAll<HTMLElement>('.ktrain-JobRow')).find(
      r => r.dataset.name === job.name && r.dataset.backend === job.backend
    );
    old?.replaceWith(this.row(job));
  }

  /** Mark a job (e.g. the one whose "Open in side panel" button was clicked). */
  highlight(name: string): void {
    this.highlighted = name;
    for (const row of Array.from(this.list.querySelectorAll<HTMLElement>('.ktrain-JobRow'))) {
      row.classList.toggle('ktrain-mod-highlighted', row.dataset.name === name);
    }
  }

  async refresh(): Promise<void> {
    if (this.inFlight) {
      return;
    }
    this.inFlight = true;
    void this.sweeps.refresh();
    try {
      this.render(await api.jobs());
    } catch (error) {
      const message = error instanceof KtrainApiError ? error.message : String(error);
      this.status.textContent = message;
      this.status.classList.add('ktrain-mod-error');
    } finally {
      this.inFlight = false;
    }
  }

  private render(payload: JobsPayload): void {
    this.status.classList.remove('ktrain-mod-error');
    const problems = payload.problems.map(p => `${p.backend}: ${p.error}`);
    this.status.textContent = payload.jobs.length
      ? problems.join('\n')
      : ['No jobs yet: run a %%ktrain cell.', ...problems].join('\n');
    const listed = new Set(payload.jobs.map(j => `${j.backend}/${j.name}`));
    for (const key of Array.from(this.selected.keys())) {
      if (!listed.has(key)) {
        this.selected.delete(key); // removed (its history too): no longer ticked
      }
    }
    this.updateCompare();
    this.list.replaceChildren(this.headerRow(), ...payload.jobs.map(j => this.row(j)));
    this.publishing = true;
    try {
      for (const job of payload.jobs) {
        publish(job); // an open job tab shows the same progress
      }
    } finally {
      this.publishing = false;
    }
  }

  private headerRow(): HTMLElement {
    const tr = document.createElement('tr');
    for (const h of ['name', 'backend', 'state', 'progress', 'age']) {
      const th = document.createElement('th');
      th.textContent = h;
      th.className = `ktrain-Col-${h}`;
      tr.appendChild(th);
    }
    return tr;
  }

  private row(job: JobSummary): HTMLElement {
    const tr = document.createElement('tr');
    tr.className = 'ktrain-JobRow';
    tr.dataset.name = job.name;
    tr.dataset.state = job.state;
    tr.dataset.backend = job.backend;
    tr.classList.toggle('ktrain-mod-highlighted', job.name === this.highlighted);
    tr.classList.toggle('ktrain-mod-history', job.history);
    const why = [job.reason, job.message].filter(Boolean).join(': ');
    const gone = job.history ? ' (deleted: shown from its history)' : '';
    tr.title = `${job.name} on ${job.backend}${gone}${why ? `: ${why}` : ''}`;
    const state = job.history ? `${job.state} · deleted` : job.state;
    const cells = [job.name, job.backend, state, progressText(job), age(job.age_s)];
    cells.forEach((text, i) => {
      const td = document.createElement('td');
      td.textContent = text;
      if (i === 0) {
        td.className = 'ktrain-Name';
        td.prepend(this.checkbox(job));
      } else if (i === 1) {
        td.className = 'ktrain-Backend';
      } else if (i === 2) {
        td.className = `ktrain-State ktrain-State-${job.state}`;
        td.style.color = stateColour(job.state);
      }
      if (i === 3) {
        td.className = 'ktrain-Progress';
        td.title = job.warm?.text ?? job.progress?.text ?? 'no progress reported yet';
      }
      tr.appendChild(td);
    });
    tr.onclick = () => this.openJob(job.name);
    return tr;
  }

  /** The row's tick box: selects the job for Compare (a click on it opens nothing). */
  private checkbox(job: JobSummary): HTMLInputElement {
    const key = `${job.backend}/${job.name}`;
    const box = document.createElement('input');
    box.type = 'checkbox';
    box.className = 'ktrain-Select';
    box.title = 'Select for Compare';
    box.checked = this.selected.has(key);
    box.onclick = event => {
      event.stopPropagation();
      if (box.checked) {
        this.selected.set(key, { name: job.name, backend: job.backend });
      } else {
        this.selected.delete(key);
      }
      this.updateCompare();
    };
    return box;
  }

  protected onAfterShow(): void {
    void this.refresh();
    this.startPolling();
  }

  protected onAfterAttach(): void {
    if (this.isVisible) {
      void this.refresh();
      this.startPolling();
    }
  }

  protected onBeforeHide(): void {
    this.stopPolling();
  }

  protected onBeforeDetach(): void {
    this.stopPolling();
  }

  private startPolling(): void {
    if (this.timer === null) {
      this.timer = window.setInterval(() => {
        if (this.isVisible && !document.hidden) {
          void this.refresh();
        }
      }, POLL_MS);
    }
  }

  private stopPolling(): void {
    if (this.timer !== null) {
      window.clearInterval(this.timer);
      this.timer = null;
    }
  }

  dispose(): void {
    this.stopPolling();
    this.unsubscribe();
    this.sweeps.dispose();
    super.dispose();
  }
}
