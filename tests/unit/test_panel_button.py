"""The cell widget's "Open in side panel" button: enabled with a callback, and marked with the
DOM classes the JupyterLab extension's click listener reads (the browser test clicks it)."""

from __future__ import annotations

import pytest

from jupyter_ktrain.monitor.model import JobHeader, MonitorModel

pytest.importorskip("ipywidgets")


def test_button_enabled_and_names_its_job_for_the_labextension() -> None:
    from jupyter_ktrain.widgets.monitor import MonitorView, open_in_panel

    view = MonitorView(MonitorModel(JobHeader(name="my-job-7")), on_open_panel=open_in_panel)
    assert not view.panel_button.disabled
    assert {"ktrain-open-panel", "ktrain-job-my-job-7"} <= set(view.panel_button._dom_classes)


def test_button_disabled_and_unmarked_without_callback() -> None:
    from jupyter_ktrain.widgets.monitor import MonitorView

    view = MonitorView(MonitorModel(JobHeader(name="my-job-7")))
    assert view.panel_button.disabled
    assert "ktrain-open-panel" not in view.panel_button._dom_classes


def test_the_hint_watches_its_own_jobs_button_and_says_how_to_get_the_panel() -> None:
    from jupyter_ktrain.widgets.monitor import MonitorView, open_in_panel

    view = MonitorView(MonitorModel(JobHeader(name="my-job-7")), on_open_panel=open_in_panel)
    hint = view.panel_hint
    assert (hint.button_class, hint.name_class) == ("ktrain-open-panel", "ktrain-job-my-job-7")
    assert hint in view.widget.children  # shown with the monitor, empty until a click
    assert "pip install jupyter-ktrain" in hint.hint
    assert "restart JupyterLab" in hint.hint
