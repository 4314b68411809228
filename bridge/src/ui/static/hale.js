// hale's web UI: keep the page current without losing the reader's place.
// Every few seconds the page is fetched again and its <main> swapped in, unless
// the reader is using a control in it, has changed a field not yet submitted, or
// the tab is hidden. Scroll position and the URL (filters, page, window) stay;
// forms to fill in (confirmations, sign-in) are never refreshed.
"use strict";
(function () {
  // What a verb did is said once: the address loses it, so neither a refresh
  // nor a copied link says it again.
  const here = new URL(location.href);
  if (here.searchParams.has("done")) {
    here.searchParams.delete("done");
    history.replaceState(null, "", here.pathname + here.search);
  }

  const live = document.getElementById("live");
  const seconds = live ? Number(live.dataset.refresh) || 0 : 0;
  if (seconds <= 0) return; // a form to fill in, or a refusal to read
  let busy = false;

  // A field changed and not yet submitted: refreshing would throw it away.
  function changed(e) {
    if (e.type === "hidden") return false;
    if (e.type === "checkbox" || e.type === "radio") return e.checked !== e.defaultChecked;
    if (e.tagName === "SELECT") {
      return Array.from(e.options).some((o) => o.selected !== o.defaultSelected);
    }
    return e.value !== e.defaultValue;
  }

  function interacting() {
    const a = document.activeElement;
    const focused = a && live.contains(a) &&
      ["INPUT", "SELECT", "TEXTAREA", "BUTTON"].includes(a.tagName);
    return focused || Array.from(live.querySelectorAll("input, select, textarea")).some(changed);
  }

  async function refresh() {
    if (busy || document.hidden) return;
    if (interacting()) {
      // Said on the page, so whoever watches (a test, a curious reader) can see it.
      live.dataset.held = String((Number(live.dataset.held) || 0) + 1);
      return;
    }
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

  setInterval(refresh, 1000 * seconds);
})();
