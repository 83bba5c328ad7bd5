// The notes table: sortable columns, pages, and a selection that survives paging and sorting.

import { formatTime } from "../common/time.js";
import { customText } from "./form.js";

const $ = (id) => document.getElementById(id);
const COMPARE = {
  start: (a, b) => a.startMs - b.startMs,
  end: (a, b) => (a.endMs || 0) - (b.endMs || 0),
  owner: (a, b) => a.owner.localeCompare(b.owner),
  description: (a, b) => a.description.localeCompare(b.description),
};

function cell(text, className) {
  const td = document.createElement("td");
  td.textContent = text;
  if (className) td.className = className;
  return td;
}

/** A time as its date over its clock time: two short lines keep the table narrow. */
function timeCell(ms) {
  const td = cell("", "time");
  if (!ms) return td;
  const [date, clock] = formatTime(ms).split(" ");
  for (const [text, name] of [[date, "date"], [clock, "clock"]]) {
    const part = document.createElement("span");
    part.className = name;
    part.textContent = text;
    td.append(part, document.createTextNode(name === "date" ? " " : ""));
  }
  return td;
}

function button(label, accessibleName, onClick, className = "") {
  const b = document.createElement("button");
  b.type = "button";
  b.textContent = label;
  b.className = className;
  b.setAttribute("aria-label", accessibleName);
  b.addEventListener("click", onClick);
  return b;
}

function ownerCell(note) {
  const td = cell("", note.tsuid ? "scope-series" : "scope-global");
  const swatch = document.createElement("span");
  swatch.className = "swatch";
  swatch.setAttribute("aria-hidden", "true");
  if (note.tsuid) swatch.style.setProperty("--swatch", note.color); // CSSOM: CSP-safe
  td.append(swatch, document.createTextNode(note.owner));
  return td;
}

export class NotesTable {
  constructor({ onEdit, onDelete, onSelection }) {
    Object.assign(this, { onEdit, onDelete, onSelection });
    this.notes = [];
    this.selected = new Set();
    this.sort = { key: "start", dir: 1 };
    this.page = 0;
    for (const th of document.querySelectorAll("#notes-table th[data-sort]")) {
      th.querySelector("button").addEventListener("click", () => this.sortBy(th.dataset.sort));
    }
    $("page-size").addEventListener("change", () => { this.page = 0; this.render(); });
    $("page-prev").addEventListener("click", () => { this.page -= 1; this.render(); });
    $("page-next").addEventListener("click", () => { this.page += 1; this.render(); });
    $("select-page").addEventListener("change", (event) => this.selectPage(event.target.checked));
  }

  /** New notes (after a load): keep the selection of notes still present. */
  setNotes(notes) {
    this.notes = notes;
    const keys = new Set(notes.map((n) => n.key));
    this.selected = new Set([...this.selected].filter((key) => keys.has(key)));
    this.render();
  }

  selectedNotes() {
    return this.notes.filter((n) => this.selected.has(n.key));
  }

  clearSelection() {
    this.selected.clear();
    this.render();
  }

  sortBy(key) {
    this.sort = { key, dir: this.sort.key === key ? -this.sort.dir : 1 };
    this.page = 0;
    this.render();
  }

  sorted() {
    const { key, dir } = this.sort;
    return [...this.notes].sort((a, b) => dir * COMPARE[key](a, b)
      || a.startMs - b.startMs || a.owner.localeCompare(b.owner));
  }

  pageRows() {
    const size = Number($("page-size").value);
    const pages = Math.max(1, Math.ceil(this.notes.length / size));
    this.page = Math.min(Math.max(0, this.page), pages - 1);
    const first = this.page * size;
    return { rows: this.sorted().slice(first, first + size), first, pages };
  }

  selectPage(checked) {
    for (const note of this.pageRows().rows) {
      if (checked) this.selected.add(note.key); else this.selected.delete(note.key);
    }
    this.render();
  }

  row(note) {
    const tr = document.createElement("tr");
    tr.dataset.note = note.key;
    const box = document.createElement("input");
    box.type = "checkbox";
    box.checked = this.selected.has(note.key);
    box.setAttribute("aria-label", `Select note ${note.description}`);
    box.addEventListener("change", () => {
      if (box.checked) this.selected.add(note.key); else this.selected.delete(note.key);
      this.renderSelection();
    });
    const select = cell("", "select");
    select.append(box);
    const actions = cell("", "row-actions");
    actions.append(button("Edit", `Edit note ${note.description}`, () => this.onEdit(note)),
      button("Delete", `Delete note ${note.description}`, () => this.onDelete([note]), "danger"));
    tr.append(select, timeCell(note.startMs), timeCell(note.endMs), ownerCell(note),
      cell(note.description), cell(note.notes, "pre"),
      cell(customText(note.custom).replaceAll("\n", "; ")), actions);
    return tr;
  }

  render() {
    const { rows, first, pages } = this.pageRows();
    $("notes-body").replaceChildren(...rows.map((note) => this.row(note)));
    $("notes-empty").hidden = this.notes.length > 0;
    for (const th of document.querySelectorAll("#notes-table th[data-sort]")) {
      if (th.dataset.sort === this.sort.key) {
        th.setAttribute("aria-sort", this.sort.dir > 0 ? "ascending" : "descending");
      } else {
        th.removeAttribute("aria-sort");
      }
    }
    $("page-info").textContent = this.notes.length
      ? `${first + 1}–${first + rows.length} of ${this.notes.length} · page ${this.page + 1} of ${pages}`
      : "";
    $("page-prev").disabled = this.page === 0;
    $("page-next").disabled = this.page >= pages - 1;
    this.renderSelection();
  }

  renderSelection() {
    const count = this.selected.size;
    const onPage = this.pageRows().rows;
    const picked = onPage.filter((n) => this.selected.has(n.key)).length;
    $("select-page").checked = onPage.length > 0 && picked === onPage.length;
    $("select-page").indeterminate = picked > 0 && picked < onPage.length;
    $("bulk-delete").disabled = count === 0;
    $("clear-selection").disabled = count === 0;
    $("bulk-delete").textContent = count ? `Delete selected (${count})` : "Delete selected";
    $("selection-count").textContent = count ? `${count} selected` : "";
    this.onSelection(count);
  }
}
