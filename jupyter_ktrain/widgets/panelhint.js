// "Open in side panel" without the side panel: jupyter-ktrain's JupyterLab extension marks the
// page (`data-ktrain-panel` on <body>) when it loads, and its own click listener opens the
// panel. Where it is not loaded (not installed, disabled, or another front end), a click on
// the button this widget watches (found by its two classes) shows the hint instead of nothing.
function render({ model, el }) {
  el.classList.add('ktrain-panel-hint');
  el.style.fontSize = 'var(--jp-ui-font-size1, 13px)';
  el.style.color = 'var(--jp-warn-color0, #bf5b00)';
  const onClick = event => {
    const button =
      event.target instanceof Element ? event.target.closest('.' + model.get('button_class')) : null;
    if (!button || button.disabled || !button.classList.contains(model.get('name_class'))) {
      return;
    }
    el.textContent = document.body.dataset.ktrainPanel ? '' : model.get('hint');
  };
  document.addEventListener('click', onClick);
  return () => document.removeEventListener('click', onClick);
}

export default { render };
