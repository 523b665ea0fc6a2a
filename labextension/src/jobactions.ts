/**
 * What a user can do to a job from its tab: Cancel, and Stacks (every running rank's Python
 * stack, taken now, as `%ktrain stacks NAME` shows them). Each button says what is true: Cancel
 * while the job runs, Cancelling… from the click until the server answered, Cancelled (disabled)
 * at the end of a cancelled job, a disabled Cancel at any other end; Stacks while a rank runs,
 * Taking stacks… until they came, disabled once the job ended (an ended job has none).
 */
import { JobDetail, StacksPayload } from './payloads';

const CANCEL = 'Cancel';
const CANCELLING = 'Cancelling…';

export class CancelButton {
  readonly node = document.createElement('button');

  /** ``onCancel`` runs on a click: it asks the server (see pending, failed). */
  constructor(onCancel: () => void) {
    this.node.className = 'jp-Button ktrain-Cancel';
    this.node.textContent = CANCEL;
    this.node.onclick = onCancel;
  }

  /** The request is on its way: no second click. */
  pending(): void {
    this.node.disabled = true;
    this.node.textContent = CANCELLING;
  }

  /** The request failed (the error is shown elsewhere): the user may try again. */
  failed(): void {
    this.node.disabled = false;
    this.node.textContent = CANCEL;
  }

  /** The job as the server last saw it. */
  update(d: JobDetail): void {
    if (d.terminal) {
      this.node.disabled = true;
      this.node.textContent = d.state === 'Cancelled' ? 'Cancelled' : CANCEL;
    } else if (this.node.textContent !== CANCELLING) {
      this.node.disabled = false;
    }
  }
}

const STACKS = 'Stacks';
const TAKING = 'Taking stacks…';

export class StacksButton {
  readonly node = document.createElement('button');
  /** The stacks last taken, folded under a line saying when: shown once there are some. */
  readonly box = document.createElement('details');
  private readonly summary = document.createElement('summary');
  private readonly text = document.createElement('pre');

  /** ``onStacks`` runs on a click: it asks the server (see pending, shown, failed). */
  constructor(onStacks: () => void) {
    this.node.className = 'jp-Button ktrain-StacksButton';
    this.node.textContent = STACKS;
    this.node.title = "Every running rank's Python stack, now (%ktrain stacks)";
    this.node.onclick = onStacks;
    this.box.className = 'ktrain-TakenStacks';
    this.box.hidden = true;
    this.box.append(this.summary, this.text);
  }

  pending(): void {
    this.node.disabled = true;
    this.node.textContent = TAKING;
  }

  /** The server said why there are none (an ended job...): said where the stacks would be,
   * so the next poll does not wipe it. */
  failed(why: string): void {
    this.show('no stacks taken', why);
  }

  /** The stacks came: shown open, under when they were taken. */
  shown(s: StacksPayload): void {
    this.show(`stacks taken at ${new Date(s.t * 1000).toLocaleTimeString()}`, s.text);
  }

  private show(summary: string, text: string): void {
    this.node.disabled = false;
    this.node.textContent = STACKS;
    this.summary.textContent = summary;
    this.text.textContent = text;
    this.box.hidden = false;
    this.box.open = true;
  }

  /** The job as the server last saw it: no stacks to take once it ended. */
  update(d: JobDetail): void {
    if (d.terminal) {
      this.node.disabled = true;
      this.node.textContent = STACKS;
    } else if (this.node.textContent !== TAKING) {
      this.node.disabled = false;
    }
  }
}
