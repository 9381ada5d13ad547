// Citations in the rendered report (docs/pages.md): a click on a[data-citation] opens the
// passage in a dialog over the page (a drawer at the bottom on a phone), as its source page
// (the citation's own link) shows it, tables as tables, with a link to that page. The page
// does not move, and closing (Escape, the close button) returns focus to the citation.
// Clicks with a modifier key follow the link as links do.

export class Citations {
  constructor(root, dialog) {
    this.root = root;
    this.dialog = dialog;
    this.title = dialog.querySelector("[data-citation-title]");
    this.place = dialog.querySelector("[data-citation-place]");
    this.text = dialog.querySelector("[data-citation-text]");
    this.link = dialog.querySelector("[data-citation-page]");
    this.opener = null;
    this.shown = 0; // the latest opening: an older answer arriving late is dropped
    root.addEventListener("click", (event) => this.clicked(event));
    dialog.querySelector("[data-action=close-citation]").addEventListener("click", () => {
      dialog.close();
    });
    dialog.addEventListener("close", () => this.closed());
  }

  clicked(event) {
    const citation = event.target.closest("a[data-citation]");
    if (!citation || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey) {
      return;
    }
    event.preventDefault();
    this.open(citation);
  }

  async open(citation) {
    const id = citation.dataset.citation;
    const shown = ++this.shown;
    this.opener = citation;
    this.title.textContent = `Passage ${id}`;
    this.place.textContent = "";
    this.text.textContent = "Loading the passage…";
    this.link.href = citation.href;
    if (!this.dialog.open) {
      this.dialog.showModal();
    }
    this.dialog.querySelector("[data-action=close-citation]").focus({ preventScroll: true });
    const passage = await this.fetchPassage(citation.href);
    if (shown !== this.shown || !this.dialog.open) {
      return;
    }
    if (passage === null) {
      this.text.textContent = "The passage could not be loaded here: open its source page.";
      return;
    }
    this.place.textContent = passage.place;
    this.text.replaceChildren(...passage.nodes);
  }

  /** Read the passage from its source page: its place in words, and its text's nodes. */
  async fetchPassage(url) {
    try {
      const response = await fetch(url, { credentials: "same-origin" });
      if (!response.ok) {
        return null;
      }
      const page = new DOMParser().parseFromString(await response.text(), "text/html");
      const text = page.querySelector("[data-source-passage]");
      if (!text) {
        return null;
      }
      const said = (selector) => page.querySelector(selector)?.textContent.trim() || "";
      const number = said("[data-source-page]");
      const place = [said("[data-source-document]"), said("[data-source-section]")];
      place.push(number && `page ${number}`);
      const nodes = [...text.childNodes].map((node) => document.importNode(node, true));
      return { place: place.filter(Boolean).join(" · "), nodes };
    } catch {
      return null;
    }
  }

  closed() {
    this.shown += 1;
    if (this.opener && this.opener.isConnected) {
      this.opener.focus({ preventScroll: true });
    }
    this.opener = null;
  }
}
