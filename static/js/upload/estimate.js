// Before anything is sent: whether the chosen documents fit one call of the model, and if
// not, in about how many parts they will be read (the server's plan of calls; its sizes
// come with the form). Only text is counted here: a PDF's or a .docx's text is known once
// the server has read it.

const TEXT = ["txt", "md"];
const HTML = ["html", "htm"];

/** Return whether a file's characters can be counted in the browser: "text", "html" or "". */
export function countable(name) {
  const ext = name.toLowerCase().split(".").pop();
  if (TEXT.includes(ext)) {
    return "text";
  }
  return HTML.includes(ext) ? "html" : "";
}

function thousands(n) {
  return Math.round(n).toLocaleString("en-US");
}

/**
 * Return what the form says of `chars` characters of documents, given the plan's `sizes`
 * ({callChars, partChars, maxCalls}); `more`: other files whose text is not counted yet.
 * "" when they fit one call.
 */
export function planWords(chars, sizes, more = false) {
  if (chars <= sizes.callChars) {
    return "";
  }
  const about = more ? "At least" : "About";
  const parts = Math.ceil(chars / sizes.partChars);
  const head = `${about} ${thousands(chars)} characters: more than one call of the model reads (${thousands(sizes.callChars)})`;
  if (parts + 1 > sizes.maxCalls) {
    return `${head}, and more than a report may read: they would need about ${parts + 1} calls of the model, over the limit of ${sizes.maxCalls}, so they would be refused. Choose fewer or shorter documents.`;
  }
  if (parts === 1) {
    // They fit one call of notes, but not one with room for the report.
    return `${head}, so they will be read in two steps: notes on them first, then one call writes the report from the notes.`;
  }
  return `${head}, so they will be read in about ${parts} parts: notes on each part, then one call writes the report from the notes.`;
}
