// The upload form's entry: says, as documents are chosen, whether they will be read in
// parts (estimate.js).
import { countable, planWords } from "./estimate.js";

const form = document.querySelector("form[data-upload]");
const input = form && form.querySelector("input[type=file][name=files]");
const said = form && form.querySelector("[data-plan-estimate]");
const sizes = form && {
  callChars: Number(form.dataset.callChars),
  partChars: Number(form.dataset.partChars),
  maxCalls: Number(form.dataset.maxCalls),
};
const maxFileBytes = form && Number(form.dataset.maxFileBytes);
let asked = 0; // the latest choice: an earlier count that ends later is not shown

async function charsOf(file) {
  const kind = countable(file.name);
  if (!kind || file.size > maxFileBytes) {
    return null; // refused anyway, or its text is known only once read
  }
  const text = await file.text();
  if (kind === "text") {
    return text.length;
  }
  return (new DOMParser().parseFromString(text, "text/html").body.textContent || "").length;
}

async function estimate() {
  const mine = ++asked;
  let chars = 0;
  let more = false;
  for (const file of input.files) {
    const counted = await charsOf(file);
    if (counted === null) {
      more = true;
    } else {
      chars += counted;
    }
  }
  if (mine !== asked) {
    return;
  }
  const words = planWords(chars, sizes, more);
  said.textContent = words;
  said.hidden = !words;
}

if (input && said) {
  input.addEventListener("change", estimate);
}
