// A message on the task's socket (docs/api.md): `<template data-batch data-seq=N>` (N: the
// seq of the last event it covers) holding one `<template data-delta>` per text event and
// one `<template data-attempt-start>` per attempt that started; the rest of the message is
// htmx out-of-band swaps (the status line, the outcome).

/**
 * Split a message into its batch and the rest; null when it holds no batch.
 * Items are {seq, attempt, text, starts}: `starts` marks an attempt's start (no text).
 * The rest is `swaps` (a fragment, to look at) and `html` (for htmx), "" when empty.
 */
export function readMessage(message, doc = document) {
  const holder = doc.createElement("template");
  holder.innerHTML = message;
  const batch = holder.content.querySelector("template[data-batch]");
  if (!batch) {
    return null;
  }
  const items = [];
  for (const element of batch.content.children) {
    const delta = element.hasAttribute("data-delta");
    if (delta || element.hasAttribute("data-attempt-start")) {
      items.push({
        seq: Number(element.dataset.seq),
        attempt: Number(element.dataset.attempt) || 0,
        text: delta ? element.content.textContent : "",
        starts: !delta,
      });
    }
  }
  batch.remove();
  const swaps = holder.content;
  return {
    seq: Number(batch.dataset.seq),
    items,
    swaps,
    html: swaps.childElementCount ? holder.innerHTML : "",
  };
}

/**
 * Return what a batch adds to what the page received up to `receivedSeq`: the items not
 * seen yet and the seq received after it; null for a message older than what the page
 * has (its status lines would go back in time).
 */
export function accept(batch, receivedSeq) {
  if (batch.seq < receivedSeq) {
    return null;
  }
  const items = batch.items.filter((item) => item.seq > receivedSeq);
  const last = items.length ? items[items.length - 1].seq : receivedSeq;
  return { items, seq: Math.max(last, batch.seq) };
}
