// The click guard and the focus check. The runtime installs this through the DevTools protocol in
// an isolated world of every document, before any of the page's own script runs: the page cannot
// see or call it, cannot replace the built-ins it uses, and cannot forge what it reports (the
// runtime reads it over DevTools, not through the page). Its capture listeners on the window are
// the first there, so no page listener runs before them or stops them.
//
// arm(element, mode): hit-tests the element's centre ('click'; scrolling it into view when no
// box of it is in the viewport) or focuses it ('keys'), or neither ('hold'); then, until finish(), it stops
// with their default actions every trusted pointer press or click whose path holds an element the
// read did not cover, and every key and text event unless in 'keys' mode and aimed at the element.
// In a frame every trusted press, click and key is stopped, always, until ownerHasTab(): the owner
// took the tab over and the agent never acts in it again; stops() says how many since it was last
// asked (an act asks at arming and at its end).
// after(arming, turns): turns of the event loop, then the page and what the guard stopped.
(() => {
  if (globalThis.__grantLedgerGuard) return;
  const MAX_INSIDE = 20000;
  const PROBE = 'grant-ledger-guard-probe';
  // DOM properties are read through their prototypes even here: a form's named controls shadow
  // the form's own properties (`<input name=parentNode>` makes `form.parentNode` that input),
  // in every world.
  const getter = (proto, name) => {
    const get = Object.getOwnPropertyDescriptor(proto, name).get;
    return (n) => get.call(n);
  };
  const nodeType = getter(Node.prototype, 'nodeType');
  const parentOf = getter(Node.prototype, 'parentNode');
  const connected = getter(Node.prototype, 'isConnected');
  const slotOf = getter(Element.prototype, 'assignedSlot');
  const shadowOf = getter(Element.prototype, 'shadowRoot');
  const childrenOf = getter(Element.prototype, 'children');
  const hostOf = getter(ShadowRoot.prototype, 'host');
  const rootChildren = getter(DocumentFragment.prototype, 'children');
  const formElements = getter(HTMLFormElement.prototype, 'elements');
  const rectsOf = (el) => Element.prototype.getClientRects.call(el);
  // `document`'s own named properties (an `<img name=body>`) override its built-ins too.
  const docActive = getter(Document.prototype, 'activeElement');
  const rootActive = getter(ShadowRoot.prototype, 'activeElement');
  const docBody = getter(Document.prototype, 'body');
  const docTitle = getter(Document.prototype, 'title');

  // The parent an event path takes: a slotted node's slot, a shadow root's host.
  const up = (n) => {
    if (nodeType(n) === 1 && slotOf(n)) return slotOf(n);
    const p = parentOf(n);
    if (!p) return null;
    if (p instanceof ShadowRoot) return hostOf(p);
    return nodeType(p) === 1 ? p : null;
  };
  const ancestry = (set, n) => {
    for (; n; n = up(n)) set.add(n);
  };
  const formOf = (el) => {
    if (el.form instanceof HTMLFormElement) return el.form;
    for (let n = el; n; n = up(n)) if (n instanceof HTMLFormElement) return n;
    return null;
  };
  const submits = (el) => {
    if (el instanceof HTMLButtonElement) return el.type === 'submit';
    return el instanceof HTMLInputElement && (el.type === 'submit' || el.type === 'image');
  };
  // The element's flat-tree descendants as the read saw them, through open shadow roots.
  const descendants = (el, set) => {
    const stack = [el];
    while (stack.length && set.size < MAX_INSIDE) {
      const n = stack.pop();
      set.add(n);
      const root = shadowOf(n);
      if (root) stack.push(...rootChildren(root));
      stack.push(...childrenOf(n));
      if (n instanceof HTMLSlotElement) stack.push(...HTMLSlotElement.prototype.assignedElements.call(n));
    }
    return set.size < MAX_INSIDE;
  };

  let state = null;
  // The runtime acts only in the top document: in a frame, every trusted press, click and key is
  // stopped, from the document's first moment, so a frame the page adds or navigates during an
  // act takes nothing either.
  const framed = window !== window.top;
  let owned = false;
  let armings = 0;
  const frameStops = { stopped: 0 };
  let probed = false;
  const ORIGIN = performance.timeOrigin;

  // What the read covered: the element, its ancestors and descendants, the controls of labels
  // among them and its form's default button, each with its ancestors (the path a click on it
  // takes). Fixed at arming: what the page inserts or wraps around the element later is not. A
  // press or click may pass through ancestors but must be aimed at the element, a descendant or
  // one of those controls (`targets`): an event from inside a closed shadow root is aimed at its
  // host, so a control the page hides in one on an ancestor does not pass as the ancestor.
  const cover = (el) => {
    const targets = new Set();
    if (!descendants(el, targets)) return null;
    const covered = new Set(targets);
    ancestry(covered, el);
    const extra = [];
    for (const n of covered) if (n instanceof HTMLLabelElement && n.control) extra.push(n.control);
    const form = formOf(el);
    if (form) {
      const button = Array.from(formElements(form)).find(submits);
      if (button) extra.push(button);
    }
    for (const n of extra) {
      targets.add(n);
      ancestry(covered, n);
    }
    return { covered, targets };
  };

  const at = (x, y) => {
    let hit = Document.prototype.elementFromPoint.call(document, x, y);
    while (hit && shadowOf(hit)) {
      const inner = ShadowRoot.prototype.elementFromPoint.call(shadowOf(hit), x, y);
      if (!inner || inner === hit) break;
      hit = inner;
    }
    return hit;
  };
  const within = (n, el) => {
    for (; n; n = up(n)) if (n === el) return true;
    return false;
  };
  const focused = () => {
    let a = docActive(document);
    while (a && shadowOf(a) && rootActive(shadowOf(a))) a = rootActive(shadowOf(a));
    return a;
  };

  const stop = (e, count) => {
    e.preventDefault();
    e.stopImmediatePropagation();
    count.stopped++;
  };
  // Every element on the path must be one the read covered.
  const onPointer = (e) => {
    if (!e.isTrusted) return;
    if (framed) return owned ? undefined : stop(e, frameStops);
    if (!state) return;
    const path = e.composedPath();
    if (!state.targets.has(path[0])) return stop(e, state);
    for (const n of path) {
      if (n instanceof Element && !state.covered.has(n)) return stop(e, state);
    }
    if (e.type === 'click') state.reached = true;
  };
  const onKey = (e) => {
    if (!e.isTrusted) return;
    // A check box's activation fires a plain `input` event: a change of state, not text.
    if (e.type === 'input' && !(e instanceof InputEvent)) return;
    if (framed) return owned ? undefined : stop(e, frameStops);
    if (!state) return;
    if (state.mode !== 'keys' || e.composedPath()[0] !== state.el) stop(e, state);
  };
  // An element with the id `addEventListener` would shadow the window's, through its named
  // properties.
  const listenOn = (type, f, capture) => EventTarget.prototype.addEventListener.call(window, type, f, capture);
  const listen = () => {
    for (const type of ['pointerdown', 'mousedown', 'pointerup', 'mouseup', 'click', 'auxclick', 'dblclick', 'contextmenu']) {
      listenOn(type, onPointer, true);
    }
    for (const type of ['keydown', 'keypress', 'keyup', 'beforeinput', 'input', 'textInput', 'compositionstart',
      'compositionupdate', 'compositionend', 'paste', 'cut', 'drop']) {
      listenOn(type, onKey, true);
    }
    listenOn(PROBE, () => { probed = true; }, true);
  };
  listen();
  // Whether the guard's listeners are still on the window: reopening the document erases them.
  const present = () => {
    probed = false;
    EventTarget.prototype.dispatchEvent.call(window, new Event(PROBE));
    return probed;
  };
  // Reopening the document empties it: as soon as that shows, the listeners go back on (behind
  // any the page added since, which is why the loss is still reported: `lost`).
  let lost = false;
  new MutationObserver(() => {
    if (!present()) {
      lost = true;
      listen();
    }
  }).observe(document, { childList: true });
  const alive = () => present() && !lost;

  const arm = (el, mode) => {
    state = null;
    if (!(el instanceof Element) || !connected(el)) return { refused: 'the node is gone' };
    if (!alive()) return { refused: 'the page reopened its document: the guard no longer holds it' };
    if (mode === 'click') {
      const box = () => {
        const r = rectsOf(el)[0];
        if (!r) return null;
        const left = Math.max(r.left, 0), right = Math.min(r.right, window.innerWidth);
        const top = Math.max(r.top, 0), bottom = Math.min(r.bottom, window.innerHeight);
        return right > left && bottom > top ? [(left + right) / 2, (top + bottom) / 2] : null;
      };
      let c = box();
      if (!c) {
        Element.prototype.scrollIntoView.call(el, { behavior: 'instant', block: 'center', inline: 'center' });
        c = box();
      }
      if (!c) return { refused: 'the node has no box inside the viewport to click' };
      if (!within(at(Math.floor(c[0]), Math.floor(c[1])), el)) return { refused: 'another element lies over the node\'s centre' };
    } else if (mode === 'keys') {
      (el instanceof SVGElement ? SVGElement : HTMLElement).prototype.focus.call(el, { preventScroll: false });
      if (focused() !== el) return { refused: 'the node does not hold focus once focused' };
    } else if (mode !== 'hold') {
      return { refused: 'unknown guard mode' };
    }
    const cover_ = cover(el);
    if (!cover_) return { refused: 'the node holds too many elements to guard' };
    armings++;
    state = { mode, el, covered: cover_.covered, targets: cover_.targets, stopped: 0, reached: false, arming: armings };
    return { arming: armings };
  };
  // What the guard stopped since arming `arming`: 'none' when nothing is armed (a new document, or
  // one finished), 'other' when another arming replaced it; `alive` false when the document was
  // reopened and the listeners are gone.
  const finish = (arming) => {
    const live = alive();
    if (!state) return { held: 'none', stopped: 0, alive: live };
    const report = {
      held: state.arming === arming ? 'armed' : 'other',
      stopped: state.stopped,
      reached: state.reached,
      alive: live,
    };
    state = null;
    return report;
  };
  const stops = () => {
    const stopped = frameStops.stopped;
    frameStops.stopped = 0;
    return stopped;
  };
  // What the accessibility tree is made of, as one digest: every element of the flat tree (open
  // shadow roots too) with its tag, the ARIA attributes that give roles, names and states, every
  // control's value, checkedness and choice, and its text. A tick, a radio, a choice or new text
  // changes it. Both reads of an act (the runtime's page read before, this one after) use it.
  // (Values enter the digest only, never the answer.)
  const getAttr = Element.prototype.getAttribute;
  const localName = getter(Element.prototype, 'localName');
  const inputChecked = getter(HTMLInputElement.prototype, 'checked');
  const inputValue = getter(HTMLInputElement.prototype, 'value');
  const areaValue = getter(HTMLTextAreaElement.prototype, 'value');
  const selectIndex = getter(HTMLSelectElement.prototype, 'selectedIndex');
  const firstChild = getter(Node.prototype, 'firstChild');
  const nextSibling = getter(Node.prototype, 'nextSibling');
  const textData = getter(CharacterData.prototype, 'data');
  const docRoot = getter(Document.prototype, 'documentElement');
  const ARIA = ['role', 'aria-label', 'aria-labelledby', 'aria-checked', 'aria-pressed', 'aria-expanded',
    'aria-selected', 'aria-disabled', 'aria-hidden', 'aria-invalid', 'aria-current', 'aria-valuenow', 'disabled',
    'hidden', 'open', 'title', 'alt', 'value', 'placeholder'];
  const treeSig = () => {
    let h = 0x811c9dc5;
    const mix = (s) => {
      s = String(s);
      for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193);
      h = Math.imul(h ^ 0x1f, 0x01000193);
    };
    // Focus as deep as it goes, into open shadow roots: reported beside the digest, since only
    // a key press's own move of it is a change (a click focuses what it clicks).
    let active = docActive(document);
    for (let n = active; n && shadowOf(n); n = rootActive(shadowOf(n))) active = rootActive(shadowOf(n)) || active;
    let focus = '';
    let count = 0;
    const stack = docRoot(document) ? [docRoot(document)] : [];
    while (stack.length) {
      const el = stack.pop();
      count++;
      mix(localName(el));
      for (const a of ARIA) {
        const v = getAttr.call(el, a);
        if (v !== null) mix(a + '=' + v);
      }
      if (el instanceof HTMLInputElement) mix(inputChecked(el) + ':' + inputValue(el));
      else if (el instanceof HTMLTextAreaElement) mix(areaValue(el));
      else if (el instanceof HTMLSelectElement) mix(selectIndex(el));
      if (el === active) focus = String(count);
      // The element's own text, hidden or not (a hidden label still names a node), shadow roots
      // included.
      for (let t = firstChild(el); t; t = nextSibling(t)) if (nodeType(t) === 3) mix(textData(t));
      const kids = childrenOf(el);
      for (let i = kids.length - 1; i >= 0; i--) stack.push(kids[i]);
      const shadow = shadowOf(el);
      if (shadow) {
        mix('#shadow');
        const inner = rootChildren(shadow);
        for (let i = inner.length - 1; i >= 0; i--) stack.push(inner[i]);
      }
    }
    return { sig: count + ':' + (h >>> 0).toString(16), focus };
  };
  const page = () => ({
    url: location.href,
    title: docTitle(document),
    time_origin: ORIGIN,
    ...treeSig(),
  });
  const after = (arming, turns) => new Promise((resolve) => {
    let left = turns;
    const turn = () => {
      if (--left > 0) return void setTimeout(turn, 0);
      resolve({ page: page(), guard: arming === null ? null : finish(arming) });
    };
    setTimeout(turn, 0);
  });
  const ownerHasTab = () => {
    owned = true;
    return true;
  };
  globalThis.__grantLedgerGuard = Object.freeze({ arm, finish, stops, after, page, ownerHasTab });
})();
