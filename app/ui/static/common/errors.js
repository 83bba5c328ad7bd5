// Error summaries for both pages' forms.

/** Show the errors as a linked summary, mark the fields, move focus to the summary. */
export function showErrors(form, box, errors) {
  for (const field of form.querySelectorAll("[aria-invalid]")) field.removeAttribute("aria-invalid");
  box.replaceChildren();
  box.hidden = !errors.length;
  if (!errors.length) return;
  const title = document.createElement("p");
  title.textContent = errors.length === 1 ? "Please fix this:" : "Please fix these:";
  const list = document.createElement("ul");
  for (const { field, message } of errors) {
    const item = document.createElement("li");
    const target = field && document.getElementById(field);
    if (target) {
      target.setAttribute("aria-invalid", "true");
      const link = document.createElement("a");
      link.href = `#${field}`;
      link.textContent = message;
      item.append(link);
    } else {
      item.textContent = message;
    }
    list.append(item);
  }
  box.append(title, list);
  box.focus();
}
