// Making SVG elements; text always goes in through textContent.

const SVG = "http://www.w3.org/2000/svg";

export function el(name, attrs = {}, text = null) {
  const node = document.createElementNS(SVG, name);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  if (text !== null) node.textContent = text;
  return node;
}
