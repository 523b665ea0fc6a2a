/**
 * A tab that polls while it is in sight: ``start`` when shown or attached visible, ``stop``
 * when hidden, detached or disposed. The job tab and the sweep tab share it.
 */
import { Widget } from '@lumino/widgets';

export abstract class PolledWidget extends Widget {
  protected abstract start(): void;
  protected abstract stop(): void;

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
    super.dispose();
  }
}
