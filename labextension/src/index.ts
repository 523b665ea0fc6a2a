/**
 * jupyter-ktrain's JupyterLab extension: the "ktrain jobs" side panel (left sidebar), the job
 * tab (`ktrain:open-job`, args {name, mode?}: mode is where a new tab goes, e.g. 'split-right'
 * beside the notebook, whose widget then shows the same job), a sweep's tab (`ktrain:open-sweep`,
 * args {name}), and the bridge from the cell widget's "Open in side panel" button.
 *
 * The button bridge: the kernel cannot run JupyterLab commands, and while the %%ktrain cell
 * runs the kernel is busy, so the click is handled here in the browser. The widget's button
 * carries the DOM classes `ktrain-open-panel` and `ktrain-job-NAME` (job names are DNS labels,
 * so they are valid class names); a capturing click listener on the document sees the click on
 * such a button, reveals the panel, highlights the job and opens its tab. Nothing has to reach
 * the kernel for it to work. A sweep's widget has such a button too (`ktrain-open-sweep`,
 * `ktrain-sweep-NAME`): it opens the sweep's tab. The extension marks the page
 * (`<body data-ktrain-panel>`), so that the widget can tell a click no extension heard.
 */
import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { MainAreaWidget } from '@jupyterlab/apputils';
import { DockLayout } from '@lumino/widgets';
import { LabIcon } from '@jupyterlab/ui-components';

import { api, KtrainApiError } from './api';
import { CompareView } from './compareview';
import { JobView } from './jobview';
import { JobsPanel } from './panel';
import { SweepView } from './sweepview';

export const OPEN_JOB = 'ktrain:open-job';
export const OPEN_SWEEP = 'ktrain:open-sweep';
export const OPEN_PANEL = 'ktrain:open-panel';
export const BUTTON_CLASS = 'ktrain-open-panel';
const JOB_CLASS_PREFIX = 'ktrain-job-';
export const SWEEP_BUTTON_CLASS = 'ktrain-open-sweep';
const SWEEP_CLASS_PREFIX = 'ktrain-sweep-';

const ktrainIcon = new LabIcon({
  name: 'jupyter-ktrain:jobs',
  svgstr:
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24"><g class="jp-icon3" fill="#616161">' +
    '<rect x="3" y="4" width="18" height="3" rx="1"/><rect x="3" y="10.5" width="18" height="3" rx="1"/>' +
    '<rect x="3" y="17" width="12" height="3" rx="1"/></g></svg>'
});

/** The name a clicked button of class `buttonClass` carries as its class `prefix + NAME`, or
 * null for any other click (or a disabled button). */
function nameOfButton(target: EventTarget | null, buttonClass: string, prefix: string) {
  const button = target instanceof Element ? target.closest(`.${buttonClass}`) : null;
  if (!button || (button as HTMLButtonElement).disabled) {
    return null;
  }
  const cls = Array.from(button.classList).find(c => c.startsWith(prefix));
  return cls ? cls.slice(prefix.length) : null;
}

/** The job named by a clicked "Open in side panel" button, or null for any other click. */
export function jobOfButton(target: EventTarget | null): string | null {
  return nameOfButton(target, BUTTON_CLASS, JOB_CLASS_PREFIX);
}

/** The sweep named by a clicked sweep widget's "Open in side panel" button, or null. */
export function sweepOfButton(target: EventTarget | null): string | null {
  return nameOfButton(target, SWEEP_BUTTON_CLASS, SWEEP_CLASS_PREFIX);
}

/** A command's string argument (a job name, an insert mode); '' when absent or not a string. */
function textArg(value: unknown): string {
  return typeof value === 'string' ? value : '';
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-ktrain:plugin',
  description: 'ktrain jobs side panel: list jobs, open their logs and plots, cancel them.',
  autoStart: true,
  activate: (app: JupyterFrontEnd) => {
    // the cell widget's "Open in side panel" reads this mark: without it (no extension in the
    // page) a click says how to get the panel instead of doing nothing (widgets/panelhint.js)
    document.body.dataset.ktrainPanel = 'loaded';
    const tabs = new Map<string, MainAreaWidget<JobView>>();

    const openJob = (name: string, mode?: DockLayout.InsertMode) => {
      let tab = tabs.get(name);
      if (!tab || tab.isDisposed) {
        tab = new MainAreaWidget({ content: new JobView(name) });
        tab.id = `ktrain-job-tab-${name}`;
        tab.title.label = `ktrain: ${name}`;
        tab.title.icon = ktrainIcon;
        tabs.set(name, tab);
        app.shell.add(tab, 'main', mode ? { mode } : undefined);
      }
      app.shell.activateById(tab.id);
      return tab;
    };

    const openCompare = (names: string[], backend: string) => {
      const tab = new MainAreaWidget({ content: new CompareView(names, backend) });
      tab.id = `ktrain-compare-tab-${backend}-${names.join('-')}`;
      tab.title.label = `ktrain: ${names.join(' vs ')}`;
      tab.title.icon = ktrainIcon;
      app.shell.add(tab, 'main');
      app.shell.activateById(tab.id);
    };
    const sweepTabs = new Map<string, MainAreaWidget<SweepView>>();
    const openSweep = (name: string) => {
      let tab = sweepTabs.get(name);
      if (!tab || tab.isDisposed) {
        const view = new SweepView(name, job => void app.commands.execute(OPEN_JOB, { name: job }));
        tab = new MainAreaWidget({ content: view });
        tab.id = `ktrain-sweep-tab-${name}`;
        tab.title.label = `ktrain sweep: ${name}`;
        tab.title.icon = ktrainIcon;
        sweepTabs.set(name, tab);
        app.shell.add(tab, 'main');
      }
      app.shell.activateById(tab.id);
      return tab;
    };
    const panel = new JobsPanel(
      name => void app.commands.execute(OPEN_JOB, { name }),
      openCompare,
      name => void app.commands.execute(OPEN_SWEEP, { name })
    );
    panel.title.icon = ktrainIcon;
    app.shell.add(panel, 'left', { rank: 650 });

    app.commands.addCommand(OPEN_JOB, {
      label: args => `Open ktrain job ${textArg(args.name)}`.trim(),
      execute: args => {
        const name = textArg(args.name);
        if (!name) {
          throw new KtrainApiError('ktrain:open-job needs a job name: {name: "my-job"}', 400);
        }
        panel.highlight(name);
        const mode = textArg(args.mode);
        return openJob(name, mode ? (mode as DockLayout.InsertMode) : undefined);
      }
    });
    app.commands.addCommand(OPEN_SWEEP, {
      label: args => `Open ktrain sweep ${textArg(args.name)}`.trim(),
      execute: args => {
        const name = textArg(args.name);
        if (!name) {
          throw new KtrainApiError('ktrain:open-sweep needs a sweep name: {name: "my-sweep"}', 400);
        }
        return openSweep(name);
      }
    });
    app.commands.addCommand(OPEN_PANEL, {
      label: 'Show ktrain jobs',
      execute: () => {
        app.shell.activateById(panel.id);
        return panel.refresh();
      }
    });

    document.addEventListener(
      'click',
      event => {
        const name = jobOfButton(event.target);
        if (name) {
          app.shell.activateById(panel.id);
          void app.commands.execute(OPEN_JOB, { name });
        }
        const sweep = sweepOfButton(event.target);
        if (sweep) {
          app.shell.activateById(panel.id);
          void app.commands.execute(OPEN_SWEEP, { name: sweep });
        }
      },
      true
    );

    // say at once (in the panel) when the server half is missing
    api.ping().catch(error => void panel.refresh().then(() => console.warn(error)));
  }
};

export default plugin;
