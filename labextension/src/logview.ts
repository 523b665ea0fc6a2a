/**
 * A job tab's log pane: the rank selector and line filter, and the lines. Lines are read
 * incrementally (GET .../logs?offset=, the previous response's next_offset); changing the rank
 * or filter starts again from offset "" (the server filters). Each line's label is in its
 * rank's colour; the pane keeps the last MAX_SHOWN_LINES and follows the end while scrolled
 * there. From 16 ranks up a rank filter (a multiple choice) shows, with rank 0 and every rank
 * that printed a warning or an error chosen (the server says which: the metrics payload's
 * log_start), listed first, until the user chooses; the rank selector beside it then says how
 * many are chosen, not "all ranks"; lines of no rank (the agent's) always show.
 */
import { api } from './api';
import { rankColour } from './colours';
import { LogLinePayload, MetricsPayload } from './payloads';

const MAX_SHOWN_LINES = 20000;
const PAGES_PER_READ = 20;

export class LogView {
  readonly controls = document.createElement('div');
  readonly box = document.createElement('pre');
  private rankSelect = document.createElement('select');
  private grepInput = document.createElement('input');
  private rankFilter = document.createElement('select');
  private allRanks = document.createElement('button');
  private filterBox = document.createElement('div');
  private chosen: Set<number> | null = null; // null: every rank
  private touched = false; // the user chose: new warning ranks no longer join
  private filterKey = '';
  private offset = '';
  private ranks = new Set<number>();
  private shown = 0;
  private generation = 0;
  private ended = false;
  private everyLabel = 'all ranks'; // the rank selector's first choice (sayChosen)

  /** ``onFilter`` runs after the rank or the filter changed (and the pane was emptied): read
   * again at once. */
  constructor(
    private readonly jobName: string,
    onFilter: () => void
  ) {
    this.rankSelect.className = 'ktrain-RankSelect';
    this.rankSelect.add(new Option('all ranks', ''));
    this.grepInput.className = 'ktrain-Grep';
    this.grepInput.placeholder = 'filter lines…';
    const changed = (): void => {
      this.restart();
      onFilter();
    };
    this.rankSelect.onchange = changed;
    this.grepInput.onchange = changed;
    this.rankFilter.className = 'ktrain-RankFilter';
    this.rankFilter.multiple = true;
    this.rankFilter.size = 6;
    this.rankFilter.onchange = () => {
      this.touched = true;
      this.chosen = new Set(Array.from(this.rankFilter.selectedOptions, o => Number(o.value)));
      this.sayChosen();
      changed();
    };
    this.allRanks.textContent = 'all ranks';
    this.allRanks.className = 'ktrain-AllRanks';
    this.allRanks.onclick = () => {
      for (const o of Array.from(this.rankFilter.options)) {
        o.selected = true;
      }
      this.rankFilter.onchange?.(new Event('change'));
    };
    this.filterBox.className = 'ktrain-RankFilterBox';
    this.filterBox.hidden = true;
    this.filterBox.append('Ranks ', this.rankFilter, this.allRanks);
    this.box.className = 'ktrain-Logs';
    this.controls.className = 'ktrain-LogControls';
    this.controls.append('Show ', this.rankSelect, this.grepInput, this.filterBox);
  }

  /** A big job's rank filter from the metrics payload: every rank that printed a line, and
   * until the user chose, the starting ranks (the pane is read again when they change). */
  setRanks(m: MetricsPayload): void {
    const start = m.log_start ?? null;
    if (start === null) {
      return;
    }
    const flagged = m.log_flagged ?? {};
    // the ranks it starts with (rank 0, those that warned or failed) first: in view at the top
    // of the box, not below its rows
    const first = new Set([...start, ...Object.keys(flagged).map(Number)]);
    const ranks = Array.from(new Set([...(m.log_ranks ?? []), ...start])).sort(
      (a, b) => Number(!first.has(a)) - Number(!first.has(b)) || a - b
    );
    const chosen = this.touched ? (this.chosen ?? new Set(ranks)) : new Set(start);
    const key = JSON.stringify([ranks, [...chosen].sort((a, b) => a - b), flagged]);
    if (key === this.filterKey) {
      return;
    }
    this.filterKey = key;
    this.rankFilter.replaceChildren(
      ...ranks.map(r => {
        const level = flagged[String(r)];
        const option = new Option(level ? `rank ${r} (${level})` : `rank ${r}`, String(r));
        option.selected = chosen.has(r);
        return option;
      })
    );
    this.filterBox.hidden = false;
    const before = this.chosen === null ? '' : [...this.chosen].sort((a, b) => a - b).join(',');
    this.chosen = chosen;
    this.sayChosen();
    if ([...chosen].sort((a, b) => a - b).join(',') !== before) {
      this.restart(); // the next poll reads the chosen ranks' lines from the start
    }
  }

  /** Every line of the ended job was read: nothing more will come. */
  get done(): boolean {
    return this.ended;
  }

  /** The new lines (up to PAGES_PER_READ pages): appended unless the rank or filter changed
   * meanwhile (that read starts over). */
  async read(): Promise<void> {
    const generation = this.generation;
    const rank = this.rankSelect.value === '' ? null : Number(this.rankSelect.value);
    // a big job's chosen ranks, while every rank is selected (none chosen: every rank)
    const ranks =
      rank === null && this.chosen !== null ? [...this.chosen].sort((a, b) => a - b).join(',') : '';
    for (let page = 0; page < PAGES_PER_READ && !this.ended; page++) {
      const r = await api.logs(this.jobName, {
        rank,
        ranks,
        grep: this.grepInput.value,
        offset: this.offset
      });
      if (generation !== this.generation) {
        return; // the rank or filter changed meanwhile: that read starts over
      }
      this.offset = r.next_offset;
      this.append(r.lines.map(row));
      for (const l of r.lines) {
        this.noteRank(l.rank);
      }
      this.ended = r.terminal;
      if (!r.more) {
        break;
      }
    }
  }

  private restart(): void {
    this.generation += 1;
    this.offset = '';
    this.shown = 0;
    this.ended = false;
    this.box.textContent = '';
  }

  /** The rank selector's "every rank" choice says what the rank filter beside it chose:
   * `3 chosen ranks` (`all ranks` while it is hidden or every rank is chosen). */
  private sayChosen(): void {
    const n = this.chosen === null ? null : this.chosen.size;
    const every = n === null || n >= this.rankFilter.options.length;
    this.everyLabel = every ? 'all ranks' : `${n} chosen rank${n === 1 ? '' : 's'}`;
    this.rankSelect.options[0].text = this.everyLabel;
  }

  /** A rank seen for the first time joins the selector (in order; the choice stays). */
  private noteRank(rank: number | null): void {
    if (rank === null || this.ranks.has(rank)) {
      return;
    }
    this.ranks.add(rank);
    const sorted = Array.from(this.ranks).sort((a, b) => a - b);
    const value = this.rankSelect.value;
    this.rankSelect.replaceChildren(
      new Option(this.everyLabel, ''),
      ...sorted.map(r => new Option(`rank ${r}`, String(r)))
    );
    this.rankSelect.value = value;
  }

  private append(lines: HTMLElement[]): void {
    if (!lines.length) {
      return;
    }
    const pinned = this.box.scrollTop + this.box.clientHeight >= this.box.scrollHeight - 4;
    this.box.append(...lines);
    this.shown += lines.length;
    while (this.shown > MAX_SHOWN_LINES && this.box.firstChild) {
      this.box.firstChild.remove();
      this.shown -= 1;
    }
    if (pinned) {
      this.box.scrollTop = this.box.scrollHeight;
    }
  }
}

/** One line: its label (`[rank3]`) in the rank's colour, then its text. */
function row(l: LogLinePayload): HTMLElement {
  const line = document.createElement('span');
  const label = document.createElement('span');
  label.className = 'ktrain-LogLabel';
  label.style.color = rankColour(l.rank);
  label.textContent = `[${l.label}]`;
  line.append(label, ` ${l.text}\n`);
  return line;
}
