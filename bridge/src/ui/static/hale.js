// hale's web UI: keep the page current without losing the reader's place.
// Every few seconds the page is fetched again and its <main> swapped in, unless
// the reader is using a control in it or the tab is hidden. Scroll position,
// the URL (filters, page, window) and anything typed stay as they were.
"use strict";
(function () {
  const live = document.getElementById("live");
  if (!live) return;
  const every = 1000 * (Number(live.dataset.refresh) || 5);
  let busy = false;

  function interacting() {
    const a = document.activeElement;
    if (!a || !live.contains(a)) return false;
    return ["INPUT", "SELECT", "TEXTAREA", "BUTTON"].includes(a.tagName);
  }

  async function refresh() {
    if (busy || document.hidden || interacting()) return;
    busy = true;
    try {
      const answer = await fetch(location.href, {
        credentials: "same-origin",
        headers: { "X-Hale-Refresh": "1" },
        redirect: "manual",
      });
      if (!answer.ok) return;
      const doc = new DOMParser().parseFromString(await answer.text(), "text/html");
      const next = doc.getElementById("live");
      if (!next || interacting()) return;
      const x = window.scrollX, y = window.scrollY;
      live.replaceChildren(...Array.from(next.childNodes).map((n) => document.adoptNode(n)));
      window.scrollTo(x, y);
    } catch (_) {
      // A failed refresh leaves the page as it was; the time shown says how old it is.
    } finally {
      busy = false;
    }
  }

  setInterval(refresh, every);
})();
