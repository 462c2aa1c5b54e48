// The click guard and the focus check. The runtime installs this in every document through the
// DevTools protocol before any of the page's own script runs, so the built-ins it keeps are the
// browser's and its listeners are the first on the window: no page listener can run before them
// or stop them. The page can see the entry point, but every call needs the secret the runtime
// baked into this copy, which lives only in this closure.
//
// entry(secret, 'arm', 'click' | 'keys' | 'hold', element, scroll) hit-tests (click; scrolling
// the element into view only when `scroll`, else answering { scroll: true }) or focuses (keys)
// the element and then, until it is finished, stops every trusted click aimed at an element the
// read did not cover, and every key and text event unless in 'keys' mode and aimed at the
// element, each with its default action, counting what it stopped. entry(secret, 'finish',
// arming) disarms and reports; entry(secret, 'after', arming, turns, done) does so after `turns`
// turns of the event loop, with the page's URL and signature.
(() => {
  const SECRET = '__SECRET__';
  const NAME = '__grantLedgerGuard';
  if (Object.getOwnPropertyDescriptor(window, NAME)) return;
  const getter = (proto, name) => Object.getOwnPropertyDescriptor(proto, name).get;
  // `call(f, self, ...args)`: the browser's own Function.prototype.call, whatever the page does
  // to it later.
  const call = Function.prototype.call.bind(Function.prototype.call);
  const attempt = (f, self) => { try { return call(f, self); } catch { return null; } };
  const LISTEN = EventTarget.prototype.addEventListener;
  const PATH = Event.prototype.composedPath;
  const INPUT_TYPE = getter(InputEvent.prototype, 'inputType');
  const PREVENT = Event.prototype.preventDefault;
  const STOP = Event.prototype.stopImmediatePropagation;
  const PARENT = getter(Node.prototype, 'parentNode');
  const NODE_TYPE = getter(Node.prototype, 'nodeType');
  const HOST = getter(ShadowRoot.prototype, 'host');
  const SLOT = getter(Element.prototype, 'assignedSlot');
  const SHADOW = getter(Element.prototype, 'shadowRoot');
  const LOCAL = getter(Element.prototype, 'localName');
  const NS = getter(Element.prototype, 'namespaceURI');
  const GET_ATTR = Element.prototype.getAttribute;
  const QUERY_ALL = Element.prototype.querySelectorAll;
  const NODES_LENGTH = getter(NodeList.prototype, 'length');
  const NODES_ITEM = NodeList.prototype.item;
  const RECTS = Element.prototype.getClientRects;
  const RECTS_LENGTH = getter(DOMRectList.prototype, 'length');
  const RECTS_ITEM = DOMRectList.prototype.item;
  const [LEFT, RIGHT, TOP, BOTTOM] = ['left', 'right', 'top', 'bottom'].map((k) => getter(DOMRectReadOnly.prototype, k));
  const SCROLL = Element.prototype.scrollIntoView;
  const FOCUS = HTMLElement.prototype.focus;
  const SVG_FOCUS = SVGElement.prototype.focus;
  const DOC_ACTIVE = getter(Document.prototype, 'activeElement');
  const ROOT_ACTIVE = getter(ShadowRoot.prototype, 'activeElement');
  const DOC_AT = Document.prototype.elementFromPoint;
  const ROOT_AT = ShadowRoot.prototype.elementFromPoint;
  const LABEL_CONTROL = getter(HTMLLabelElement.prototype, 'control');
  const FORM_ELEMENTS = getter(HTMLFormElement.prototype, 'elements');
  const COLLECTION_LENGTH = getter(HTMLCollection.prototype, 'length');
  const COLLECTION_ITEM = HTMLCollection.prototype.item;
  // The form getter of each form-associated element, by local name.
  const FORM_OF = {
    __proto__: null,
    button: getter(HTMLButtonElement.prototype, 'form'),
    input: getter(HTMLInputElement.prototype, 'form'),
    select: getter(HTMLSelectElement.prototype, 'form'),
    textarea: getter(HTMLTextAreaElement.prototype, 'form'),
    output: getter(HTMLOutputElement.prototype, 'form'),
    fieldset: getter(HTMLFieldSetElement.prototype, 'form'),
    object: getter(HTMLObjectElement.prototype, 'form'),
  };
  // The viewport's size, from the window's own (replaceable) properties as they are now.
  const INNER_W = Object.getOwnPropertyDescriptor(window, 'innerWidth').get;
  const INNER_H = Object.getOwnPropertyDescriptor(window, 'innerHeight').get;
  const [max, min, floor] = [Math.max, Math.min, Math.floor];
  const LOWER = String.prototype.toLowerCase;
  const SET_TIMEOUT = window.setTimeout;
  const BY_TAG = Document.prototype.getElementsByTagName;
  const BODY = getter(Document.prototype, 'body');
  const TITLE = getter(Document.prototype, 'title');
  const TEXT = getter(Node.prototype, 'textContent');
  const HREF = Object.getOwnPropertyDescriptor(location, 'href').get;
  const SetC = Set;
  const SET_ADD = Set.prototype.add;
  const SET_HAS = Set.prototype.has;
  const HTML = 'http://www.w3.org/1999/xhtml';
  const SVG = 'http://www.w3.org/2000/svg';

  const isElement = (n) => n !== null && typeof n === 'object' && attempt(NODE_TYPE, n) === 1;
  const local = (el) => (call(NS, el) === HTML ? call(LOCAL, el) : '');
  // The parent an event path takes: a slotted node's slot, a shadow root's host.
  const up = (n) => {
    if (call(NODE_TYPE, n) === 1) {
      const slot = call(SLOT, n);
      if (slot) return slot;
    }
    const p = call(PARENT, n);
    if (!p) return null;
    const type = call(NODE_TYPE, p);
    if (type === 11) return attempt(HOST, p);
    return type === 1 ? p : null;
  };
  const formOf = (el) => {
    const get = FORM_OF[local(el)];
    if (get) return call(get, el);
    for (let n = el; n; n = up(n)) if (local(n) === 'form') return n;
    return null;
  };
  const submits = (el) => {
    const name = local(el);
    const type = call(LOWER, String(call(GET_ATTR, el, 'type') || ''));
    if (name === 'button') return type !== 'reset' && type !== 'button';
    return name === 'input' && (type === 'submit' || type === 'image');
  };
  const add = (set, n) => { if (n) call(SET_ADD, set, n); };
  const labelControl = (set, n) => { if (local(n) === 'label') add(set, call(LABEL_CONTROL, n)); };

  let state = null;
  let armings = 0;
  const ORIGIN = performance.timeOrigin;

  // What the read covered: the element, its ancestors and descendants (descendants are found
  // from each event's path), the controls of labels among them, and its form's default button.
  const cover = (el) => {
    const covered = new SetC();
    for (let n = el; n; n = up(n)) {
      add(covered, n);
      labelControl(covered, n);
    }
    const inside = call(QUERY_ALL, el, 'label');
    for (let i = 0; i < call(NODES_LENGTH, inside); i++) labelControl(covered, call(NODES_ITEM, inside, i));
    const form = formOf(el);
    if (form) {
      const els = call(FORM_ELEMENTS, form);
      for (let i = 0; i < call(COLLECTION_LENGTH, els); i++) {
        const c = call(COLLECTION_ITEM, els, i);
        if (submits(c)) { add(covered, c); break; }
      }
    }
    return covered;
  };

  // The deepest element at a point, through open shadow roots.
  const at = (x, y) => {
    let hit = call(DOC_AT, document, x, y);
    while (hit) {
      const root = call(SHADOW, hit);
      const inner = root ? call(ROOT_AT, root, x, y) : null;
      if (!inner || inner === hit) break;
      hit = inner;
    }
    return hit;
  };
  const within = (n, el) => {
    for (; n; n = up(n)) if (n === el) return true;
    return false;
  };
  // The element holding focus, through open shadow roots.
  const focused = () => {
    let a = call(DOC_ACTIVE, document);
    while (a) {
      const root = call(SHADOW, a);
      const inner = root ? call(ROOT_ACTIVE, root) : null;
      if (!inner) break;
      a = inner;
    }
    return a;
  };

  const stop = (e) => {
    call(PREVENT, e);
    call(STOP, e);
    state.stopped++;
  };
  const onClick = (e) => {
    if (!state || !e.isTrusted) return;
    const path = call(PATH, e);
    if (call(SET_HAS, state.covered, path[0])) return;
    for (let i = 0; i < path.length; i++) if (path[i] === state.el) return;
    stop(e);
  };
  const onKey = (e) => {
    if (!state || !e.isTrusted) return;
    // A check box's activation fires a plain `input` event: a change of state, not text.
    if (e.type === 'input' && attempt(INPUT_TYPE, e) === null) return;
    if (state.mode !== 'keys' || call(PATH, e)[0] !== state.el) stop(e);
  };
  const CLICKS = ['click', 'auxclick', 'dblclick'];
  const KEYS = ['keydown', 'keypress', 'keyup', 'beforeinput', 'input', 'textInput', 'compositionstart',
    'compositionupdate', 'compositionend', 'paste', 'cut', 'drop'];
  for (let i = 0; i < CLICKS.length; i++) call(LISTEN, window, CLICKS[i], onClick, true);
  for (let i = 0; i < KEYS.length; i++) call(LISTEN, window, KEYS[i], onKey, true);

  const arm = (mode, el, scroll) => {
    state = null;
    if (!isElement(el)) return { refused: 'the node is gone' };
    if (mode === 'click') {
      // The centre of the first box inside the viewport, where the driver's click lands.
      const box = () => {
        const rects = call(RECTS, el);
        if (call(RECTS_LENGTH, rects) === 0) return null;
        const r = call(RECTS_ITEM, rects, 0);
        const left = max(call(LEFT, r), 0);
        const right = min(call(RIGHT, r), call(INNER_W, window));
        const top = max(call(TOP, r), 0);
        const bottom = min(call(BOTTOM, r), call(INNER_H, window));
        return right > left && bottom > top ? [left, right, top, bottom] : null;
      };
      let b = box();
      if (!b && !scroll) return { scroll: true };
      if (!b) {
        call(SCROLL, el, { behavior: 'instant', block: 'center', inline: 'center' });
        b = box();
      }
      if (!b) return { refused: 'the node has no box inside the viewport to click' };
      const [left, right, top, bottom] = [b[0], b[1], b[2], b[3]];
      const hit = at(floor((left + right) / 2), floor((top + bottom) / 2));
      if (!within(hit, el)) return { refused: 'another element lies over the node\'s centre' };
    } else if (mode === 'keys') {
      call(call(NS, el) === SVG ? SVG_FOCUS : FOCUS, el, { preventScroll: false });
      if (focused() !== el) return { refused: 'the node does not hold focus once focused' };
    } else if (mode !== 'hold') {
      return { refused: 'unknown guard mode' };
    }
    armings++;
    state = { mode, el, covered: cover(el), stopped: 0, arming: armings };
    return { arming: armings };
  };
  // What the guard stopped since arming `arming`: 'none' when nothing is armed (a new document,
  // or the guard was finished), 'other' when another arming replaced it.
  const finish = (arming) => {
    if (!state) return { held: 'none', stopped: 0, time_origin: ORIGIN };
    const held = state.arming === arming ? 'armed' : 'other';
    const stopped = state.stopped;
    state = null;
    return { held, stopped, time_origin: ORIGIN };
  };
  // After an act: `turns` turns of the page's event loop (so that everything the act queued
  // without delay has run), then the page as it is and what the guard stopped, to `done`.
  const after = (arming, turns, done) => {
    let left = turns;
    const turn = () => {
      if (--left > 0) {
        call(SET_TIMEOUT, window, turn, 0);
        return;
      }
      const guard = arming === null ? null : finish(arming);
      const all = call(BY_TAG, document, '*');
      const body = call(BODY, document);
      const sig = call(COLLECTION_LENGTH, all) + ':' + (body ? call(TEXT, body).length : 0);
      done({ page: { url: call(HREF, location), title: call(TITLE, document), time_origin: ORIGIN, sig }, guard });
    };
    call(SET_TIMEOUT, window, turn, 0);
  };
  const entry = (secret, op, a, b, c) => {
    if (secret !== SECRET) return null;
    if (op === 'arm') return arm(a, b, c === true);
    if (op === 'after') return after(a, b, c);
    return finish(a);
  };
  Object.defineProperty(window, NAME, { value: entry, writable: false, enumerable: false, configurable: false });
})();
