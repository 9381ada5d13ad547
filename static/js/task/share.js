// The share section ([data-share]) is swapped whole by htmx when a link is made or the
// links are revoked, the control that was pressed with it: the focus fell to the page's
// start, and the new section's words, a live region inserted afresh, went unsaid. Here
// the focus goes to what the answer says: the new link (selected, to copy), the field a
// refusal is about, or the outcome's line.

/** Return the element of the swapped-in share section that should take the focus. */
export function shareFocusTarget(section) {
  if (!section) {
    return null;
  }
  const link = section.querySelector("[data-share-url]");
  if (link) {
    return link;
  }
  if (section.querySelector("[data-share-error]")) {
    return section.querySelector("input[name=expires_in_days]");
  }
  const outcome = section.querySelector("[data-share-outcome]");
  return outcome && outcome.textContent.trim() ? outcome : null;
}

export function followShares(doc) {
  doc.addEventListener("htmx:afterSettle", (event) => {
    const detail = event.detail;
    // A press of the section's own forms, not the page's out-of-band swaps.
    if (!detail.requestConfig || !detail.target || detail.target.id !== "task-share") {
      return;
    }
    const target = shareFocusTarget(doc.getElementById("task-share"));
    if (target) {
      target.focus();
      if (target.matches("[data-share-url]")) {
        target.select();
      }
    }
  });
}
