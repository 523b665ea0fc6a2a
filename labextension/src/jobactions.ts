/**
 * What a user can do to a job from its tab: Cancel. The button says what is true: Cancel while
 * the job runs, Cancelling… from the click until the server answered, Cancelled (disabled) at
 * the end of a cancelled job, a disabled Cancel at any other end.
 */
import { JobDetail } from './payloads';

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
