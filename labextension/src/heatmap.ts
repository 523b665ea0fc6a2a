/**
 * From 8 GPUs up, a job's GPUs as one heatmap (rows: nodes, columns: GPU indexes) with a
 * selector for the field (utilisation, memory, power): a plain table, cheap to draw again.
 * The server shapes every cell (its colour, idle/hot mark and words on hover:
 * jupyter_ktrain/monitor/glance.py, the widget's too), so this only lays it out.
 */
import { GpuHeatmap } from './payloads';

/** The heatmap of field ``field`` (the first when absent); ``onField`` runs with the field
 * the user picks. */
export function renderHeatmap(
  grids: GpuHeatmap[],
  field: string | null,
  onField: (field: string) => void
): HTMLElement {
  const grid = grids.find(g => g.field === field) ?? grids[0];
  const box = document.createElement('div');
  box.className = 'ktrain-Heatmap';
  box.dataset.field = grid.field;
  const head = document.createElement('div');
  head.className = 'ktrain-HeatHead';
  const select = document.createElement('select');
  select.className = 'ktrain-HeatField';
  for (const g of grids) {
    select.add(new Option(g.title, g.field));
  }
  select.value = grid.field;
  select.onchange = () => onField(select.value);
  const count = document.createElement('span');
  count.className = 'ktrain-HeatCount';
  count.textContent = ` ${grid.idle} idle · ${grid.hot} hot`;
  head.append(select, count);
  const table = document.createElement('table');
  table.className = 'ktrain-HeatTable';
  const top = table.insertRow();
  top.appendChild(document.createElement('th'));
  for (const g of grid.gpus) {
    const th = document.createElement('th');
    th.textContent = `GPU ${g}`;
    top.appendChild(th);
  }
  for (const row of grid.rows) {
    const tr = table.insertRow();
    const th = document.createElement('th');
    th.textContent = row.name;
    tr.appendChild(th);
    for (const c of row.cells) {
      const td = tr.insertCell();
      td.textContent = c.label;
      td.title = c.title;
      td.style.background = c.colour;
      td.dataset.mark = c.mark;
      td.dataset.gpu = String(c.gpu);
    }
  }
  box.append(head, table);
  return box;
}
