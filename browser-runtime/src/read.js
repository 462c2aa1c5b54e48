// The runtime's one read of a page, sent with every observe and every act so that both read the
// same way. It runs in the guard's isolated world (called over DevTools), where the page's script
// can neither see it nor replace the built-ins it uses. `arguments[0]` is "observe" (every node of
// the flat tree, kept in this world under the snapshot id `arguments[1]`; the arguments after
// those are the elements the browser's accessibility tree exposes under a role of the closed
// set), "one" (node `arguments[2]` of snapshot `arguments[1]`, read again and returned with its
// element for the act) or "form" (the fields of that node's form). The facts travel as one JSON
// string without empty values: far cheaper than an object graph.
//
// Roles and names shown to the model are the accessibility tree's (`platform.rs`); `roleOf` and
// the name computed here serve the elements the tree exposes under another role, and the
// classifier reads every label source below separately whatever the name is.
//
// Deny-biased on purpose: hidden text counts as text, a label source longer than MAX is carried
// cut with a mark, and anything that could send the click elsewhere is a navigation target.
//
// DOM properties are still read through their prototypes: a form's named controls shadow the
// form's own properties in every world.
const mode = arguments[0];
const MAX_ALERTS = 8;
const MAX_ALERT_CHARS = 300;
const FORM_ELEMENTS = Object.getOwnPropertyDescriptor(HTMLFormElement.prototype, 'elements').get;
const FORM_ACTION = Object.getOwnPropertyDescriptor(HTMLFormElement.prototype, 'action').get;
const FORM_METHOD = Object.getOwnPropertyDescriptor(HTMLFormElement.prototype, 'method').get;
const FORM_TARGET = Object.getOwnPropertyDescriptor(HTMLFormElement.prototype, 'target').get;
// MAX (the label cut), MAX_OPTIONS (one past the options kept), MAX_NODES (the nodes one read
// returns) and ROLES (the closed set of roles) come before this script from the Rust constants
// (`page::READ`). A form's values are read whole: the runtime redacts.
const SVG = 'http://www.w3.org/2000/svg';
const XLINK = 'http://www.w3.org/1999/xlink';
const BLOCK = new Set([
  'address', 'article', 'aside', 'blockquote', 'br', 'dd', 'div', 'dl', 'dt', 'fieldset', 'figcaption', 'figure',
  'footer', 'form', 'h1', 'h2', 'h3', 'h4', 'h5', 'h6', 'header', 'hr', 'li', 'main', 'nav', 'ol', 'p', 'pre',
  'section', 'table', 'td', 'th', 'tr', 'ul',
]);
const BUTTON_INPUTS = new Set(['button', 'submit', 'reset', 'image']);
// ARIA 1.2's roles (abstract ones excluded): the first of these in a `role` attribute is the
// element's role; tokens outside it are skipped, and with none left the element keeps its own.
const ARIA_ROLES = new Set(('alert alertdialog application article banner blockquote button caption cell checkbox code ' +
  'columnheader combobox comment complementary contentinfo definition deletion dialog directory document emphasis ' +
  'feed figure form generic grid gridcell group heading img insertion link list listbox listitem log main mark ' +
  'marquee math menu menubar menuitem menuitemcheckbox menuitemradio meter navigation none note option paragraph ' +
  'presentation progressbar radio radiogroup region row rowgroup rowheader scrollbar search searchbox separator ' +
  'slider spinbutton status strong subscript superscript suggestion switch tab table tablist tabpanel term textbox ' +
  'time timer toolbar tooltip tree treegrid treeitem').split(' '));
// The elements an author may attach a shadow root to: a shadow root on any other element is the
// browser's own (a date input's spin buttons), whose parts are the control's, not nodes.
const AUTHOR_HOSTS = new Set(['article', 'aside', 'blockquote', 'body', 'div', 'footer', 'h1', 'h2', 'h3', 'h4', 'h5',
  'h6', 'header', 'main', 'nav', 'p', 'section', 'span']);
const TEXT_INPUTS = new Set(['', 'text', 'email', 'tel', 'url', 'number', 'password']);
const GET_STYLE = window.getComputedStyle;
const IDENTITY = /\b(name|given-name|family-name|additional-name|honorific-prefix|honorific-suffix|nickname|username|bday|bday-day|bday-month|bday-year|sex|street-address|address-line1|address-line2|address-line3|postal-code|country|country-name|tel|tel-national|email)\b/;

// Built-ins are read from their prototypes: a form's named controls shadow the form's own
// properties (`<input name=nodeType>` makes `form.nodeType` that input), and markup alone must not
// steer the read.
const getter = (proto, name) => Object.getOwnPropertyDescriptor(proto, name).get;
const NODE_TYPE = getter(Node.prototype, 'nodeType');
const PARENT = getter(Node.prototype, 'parentNode');
const CHILDREN = getter(Node.prototype, 'childNodes');
const SHADOW = getter(Element.prototype, 'shadowRoot');
const LOCAL = getter(Element.prototype, 'localName');
const NS = getter(Element.prototype, 'namespaceURI');
const ELEMENT_SLOT = getter(Element.prototype, 'assignedSlot');
const TEXT_SLOT = getter(Text.prototype, 'assignedSlot');
const HOST = getter(ShadowRoot.prototype, 'host');
const ACTIVE = getter(Document.prototype, 'activeElement');
const GET_ATTR = Element.prototype.getAttribute;
const CHECK_VISIBILITY = Element.prototype.checkVisibility;
const RECT = Element.prototype.getBoundingClientRect;
const MATCHES = Element.prototype.matches;
const HAS_ATTR = Element.prototype.hasAttribute;
const HAS_ATTR_NS = Element.prototype.hasAttributeNS;
const ROOT = Node.prototype.getRootNode;
const BY_ID_DOC = Document.prototype.getElementById;
const BY_ID_FRAG = DocumentFragment.prototype.getElementById;
const nodeType = (n) => NODE_TYPE.call(n);
// A form's named controls shadow these too (`<input name=isContentEditable>`, `<select
// name=labels>`): read them from the prototypes that define them, and labels only on elements
// that can have them.
const EDITABLE = getter(HTMLElement.prototype, 'isContentEditable');
const ASSIGNED_NODES = HTMLSlotElement.prototype.assignedNodes;
const editable = (n) => n instanceof HTMLElement && EDITABLE.call(n);
const LABELS = [HTMLButtonElement, HTMLInputElement, HTMLMeterElement, HTMLOutputElement, HTMLProgressElement,
  HTMLSelectElement, HTMLTextAreaElement].map((c) => [c, getter(c.prototype, 'labels')]);
const labelsOf = (n) => {
  for (const [c, get] of LABELS) if (n instanceof c) return get.call(n);
  return null;
};
const parentOf = (n) => PARENT.call(n);
const childrenOf = (n) => CHILDREN.call(n);
const shadowOf = (n) => SHADOW.call(n);
const local = (n) => LOCAL.call(n);
const ns = (n) => NS.call(n);
const slotOf = (n) => {
  const t = nodeType(n);
  return t === 1 ? ELEMENT_SLOT.call(n) : t === 3 ? TEXT_SLOT.call(n) : null;
};
const attr = (n, a) => GET_ATTR.call(n, a);
const hasAttr = (n, a) => HAS_ATTR.call(n, a);
const rootOf = (n) => ROOT.call(n);
const byIdIn = (root, id) =>
  root instanceof Document ? BY_ID_DOC.call(root, id) : root instanceof DocumentFragment ? BY_ID_FRAG.call(root, id) : null;

// The flat tree the browser renders: open shadow roots instead of their host's children, and a
// slot's assigned nodes (or its fallback) in its place.
function flatChildren(n) {
  if (nodeType(n) === 1 && shadowOf(n)) return shadowOf(n).childNodes;
  // An HTML slot only: an SVG or other element named `slot` has no assigned nodes.
  if (n instanceof HTMLSlotElement) {
    const assigned = ASSIGNED_NODES.call(n);
    if (assigned.length) return assigned;
  }
  return childrenOf(n);
}
function flatParent(n) {
  if (slotOf(n)) return slotOf(n);
  const p = parentOf(n);
  if (p && nodeType(p) === 11) return HOST.call(p) || null;
  return p && nodeType(p) === 1 ? p : null;
}
function ancestors(el) {
  const out = [];
  for (let n = flatParent(el); n; n = flatParent(n)) out.push(n);
  return out;
}
function descendants(el, visit) {
  const stack = Array.from(flatChildren(el)).reverse();
  while (stack.length) {
    const n = stack.pop();
    if (nodeType(n) !== 1) continue;
    visit(n);
    const kids = flatChildren(n);
    for (let i = kids.length - 1; i >= 0; i--) stack.push(kids[i]);
  }
}

function collapse(s) {
  return s.replace(/\s+/g, ' ').trim();
}
// Every text of the flat subtree. As a label source, hidden text is included: a label the CSS
// hides can be shown, and the classifier must read it. For the name, `shown` skips what is not
// rendered, as the accessible name does.
function hiddenElement(n) {
  if (hasAttr(n, 'hidden') || attr(n, 'aria-hidden') === 'true') return true;
  return CHECK_VISIBILITY ? !CHECK_VISIBILITY.call(n, { visibilityProperty: true }) : false;
}
// The text CSS generates before and after an element (`content: "Pay "`): its quoted strings,
// escapes read as CSS reads them (`\A ` is a line break), as `attr()` is already resolved in the
// computed value. A counter drawn with a page's own symbols is not read: ADR-0129 accepts that a
// label drawn with CSS can defeat name matching.
const CSS_ESCAPE = /\\(?:([0-9a-fA-F]{1,6})[ \t\n]?|([^0-9a-fA-F]))/g;
function generated(n, which) {
  const c = GET_STYLE(n, which).content;
  if (!c || c === 'none' || c === 'normal') return '';
  let out = '';
  for (const m of c.matchAll(/"((?:[^"\\]|\\[^])*)"/g)) {
    out += m[1].replace(CSS_ESCAPE, (_, hex, ch) => (hex ? String.fromCodePoint(Math.min(parseInt(hex, 16), 0x10ffff) || 0xfffd) : ch));
  }
  return out;
}
function flatText(root, shown) {
  const out = [];
  let len = 0;
  // As a label source, what CSS adds counts as text: it is shown, and the accessible name reads it.
  const pseudo = (n, which) => {
    if (shown || len > MAX * 4) return;
    const g = generated(n, which);
    out.push(g);
    len += g.length;
  };
  const walk = (n) => {
    if (len > MAX * 4) return;
    if (nodeType(n) === 3) {
      out.push(n.data);
      len += n.data.length;
      return;
    }
    if (nodeType(n) !== 1) return;
    const t = local(n);
    if (t === 'script' || t === 'style' || t === 'template') return;
    if (shown && hiddenElement(n)) return;
    const block = BLOCK.has(t);
    if (block) out.push(' ');
    pseudo(n, '::before');
    for (const c of flatChildren(n)) walk(c);
    pseudo(n, '::after');
    if (block) out.push(' ');
  };
  if (nodeType(root) === 1) pseudo(root, '::before');
  for (const c of flatChildren(root)) walk(c);
  if (nodeType(root) === 1) pseudo(root, '::after');
  return collapse(out.join(''));
}

function isLink(n) {
  if (ns(n) === SVG) return local(n) === 'a' && (hasAttr(n, 'href') || HAS_ATTR_NS.call(n, XLINK, 'href'));
  return (local(n) === 'a' || local(n) === 'area') && hasAttr(n, 'href');
}
// The control's own type, as the browser reads it: an unknown `type` on a button is a submit.
function isSubmit(n) {
  if (local(n) === 'button' && ns(n) === 'http://www.w3.org/1999/xhtml') return n.type === 'submit';
  return local(n) === 'input' && (n.type === 'submit' || n.type === 'image');
}
// The button an implicit submission (Enter in a field) presses: the form's first submit control.
function defaultButton(f) {
  for (const c of FORM_ELEMENTS.call(f)) if (isSubmit(c)) return c;
  return null;
}
// The form a control names or the parser gave it (`form=`, a form-associated custom element's
// attribute), not counting ancestry.
function ownForm(n) {
  if ('form' in n && n.form instanceof HTMLFormElement) return n.form;
  const id = nodeType(n) === 1 ? attr(n, 'form') : null;
  if (id) {
    const f = byIdIn(rootOf(n), id);
    if (f instanceof HTMLFormElement) return f;
  }
  return null;
}
function formOwner(n) {
  const own = ownForm(n);
  if (own) return own;
  for (let p = parentOf(n); p && nodeType(p) === 1; p = parentOf(p)) if (local(p) === 'form') return p;
  return null;
}

// Every form a click on the element could submit, whatever role it shows: its own form owner
// (any click in a form counts as a submission), the form of a label's control around or inside
// it, and the form of every control inside it. A submit's card reads its form back, so a
// label, a link-shaped wrapper or a button holding `<button form=f>` must not hide the form.
function clickForms(el) {
  const forms = new Set();
  const add = (n) => {
    const f = n && formOwner(n);
    if (f) forms.add(f);
  };
  // A click on the element is a click on each of its ancestors in the rendered tree too (a
  // button around it, in a shadow root it is slotted into, or owned by a form through `form=` or
  // the parser's form pointer rather than by ancestry).
  // Every ancestor is in that chain, so a form around the element is met as itself.
  for (const a of [el, ...ancestors(el)]) {
    const own = ownForm(a);
    if (own) forms.add(own);
    if (local(a) === 'form') forms.add(a);
    if (local(a) === 'label') add(a.control);
  }
  descendants(el, (d) => {
    if (local(d) === 'label') add(d.control);
    else if ('form' in d && d.form instanceof HTMLFormElement) forms.add(d.form);
    else if (local(d) === 'form') forms.add(d);
  });
  return Array.from(forms);
}

// The keys that would submit the element's form: Enter in any input of a form (implicit
// submission), Enter or Space on a submit control. A submit goes through a click on its button,
// whose card reads the form back; a key would submit past that read.
function submitKeys(el) {
  if (!formOwner(el)) return [];
  if (isSubmit(el)) return ['Enter', ' ', 'Space'];
  return local(el) === 'input' && ns(el) === 'http://www.w3.org/1999/xhtml' ? ['Enter'] : [];
}

function roleOf(el) {
  const explicit = (attr(el, 'role') || '').trim().toLowerCase().split(/\s+/).find((r) => ARIA_ROLES.has(r));
  // `none` and `presentation` yield to a focusable or interactive element's own role, as ARIA says.
  if (explicit && explicit !== 'none' && explicit !== 'presentation') return ROLES.has(explicit) ? explicit : null;
  const t = local(el);
  if (isLink(el)) return 'link';
  if (ns(el) !== 'http://www.w3.org/1999/xhtml') return null;
  if (t === 'button' || t === 'summary') return 'button';
  if (t === 'input') {
    const ty = el.type;
    if (BUTTON_INPUTS.has(ty) || ty === 'file') return 'button';
    if (ty === 'checkbox' || ty === 'radio') return ty;
    if (ty === 'search') return 'searchbox';
    if (ty === 'number') return 'spinbutton';
    if (ty === 'range') return 'slider';
    if (TEXT_INPUTS.has(ty)) return 'textbox';
    return null;
  }
  if (t === 'textarea') return 'textbox';
  if (t === 'select') return el.multiple || el.size > 1 ? 'listbox' : 'combobox';
  if (editable(el) && attr(el, 'contenteditable') !== null) return 'textbox';
  return null;
}

function kindOf(el, role) {
  const t = local(el);
  const ac = (attr(el, 'autocomplete') || '').toLowerCase();
  const sensitive = () => {
    if (ac.includes('one-time-code')) return 'one_time_code';
    if (/\bcc-/.test(ac)) return 'payment';
    if (ac.includes('current-password') || ac.includes('new-password')) return 'password';
    if (IDENTITY.test(ac)) return 'identity';
    return null;
  };
  if (t === 'input') {
    const ty = el.type;
    if (ty === 'password') return 'password';
    if (BUTTON_INPUTS.has(ty)) return 'none';
    if (ty === 'file') return 'file';
    const s = sensitive();
    if (s) return s;
    if (ty === 'checkbox' || ty === 'radio') return ty;
    if (ty === 'search') return 'search';
    if (ty === 'text' || ty === '') return 'text';
    return 'other';
  }
  if (t === 'textarea') return sensitive() || 'text_area';
  if (t === 'select') return 'select';
  if (editable(el)) return 'editable_region';
  if (role === 'checkbox' || role === 'radio' || role === 'option') return 'custom_choice';
  if (role === 'textbox' || role === 'searchbox' || role === 'combobox' || role === 'listbox' || role === 'spinbutton' || role === 'slider') return 'other';
  return 'none';
}

function disabledOf(el) {
  if (MATCHES.call(el, ':disabled')) return true;
  if (attr(el, 'aria-disabled') === 'true') return true;
  return ancestors(el).some((a) => attr(a, 'aria-disabled') === 'true');
}
function deepActive() {
  let a = ACTIVE.call(document);
  while (a && shadowOf(a) && shadowOf(a).activeElement) a = shadowOf(a).activeElement;
  return a;
}
function visible(el) {
  const r = RECT.call(el);
  if (r.width === 0 && r.height === 0 && local(el) !== 'option') return false;
  return CHECK_VISIBILITY ? CHECK_VISIBILITY.call(el, { visibilityProperty: true }) : true;
}

function describe(el) {
  const role = roleOf(el);
  let long = false;
  const cut = (s) => {
    if (s === null || s === undefined) return null;
    s = String(s);
    if (s.length > MAX) {
      long = true;
      return s.slice(0, MAX);
    }
    return s;
  };
  const nonEmpty = (s) => (s && s.trim() ? s : null);
  const root = rootOf(el);
  const byId = (id) => byIdIn(root, id);
  const targetsOf = (attr(el, 'aria-labelledby') || '').split(/\s+/).filter(Boolean).map(byId).filter(Boolean);
  // Each target's name for the accessible name; its text and its aria-label both as sources.
  const labelledName = targetsOf.map((t) => nonEmpty(attr(t, 'aria-label')) || flatText(t, true));
  const labelledby = [];
  for (const t of targetsOf) {
    labelledby.push(flatText(t));
    if (nonEmpty(attr(t, 'aria-label'))) labelledby.push(attr(t, 'aria-label'));
  }
  const labelTexts = (c) => {
    const ls = labelsOf(c);
    return ls ? Array.from(ls).map((l) => flatText(l)) : [];
  };
  const ownLabels = labelTexts(el);
  let labels = ownLabels;
  // A click inside a label changes the label's control: its labels are this element's too.
  const controls = [];
  for (const a of [el, ...ancestors(el)]) {
    if (local(a) === 'label' && a.control && a.control !== el) controls.push(a.control);
  }
  if (local(el) === 'label' && el.control) controls.push(el.control);
  for (const c of controls) labels = labels.concat(labelTexts(c));

  const t = local(el);
  const isButtonInput = t === 'input' && BUTTON_INPUTS.has(el.type);
  const value = t === 'button' || isButtonInput ? nonEmpty(attr(el, 'value')) : null;
  const alt = nonEmpty(attr(el, 'alt'));
  const ariaLabel = nonEmpty(attr(el, 'aria-label'));
  const title = nonEmpty(attr(el, 'title'));
  const placeholder = nonEmpty(attr(el, 'placeholder'));
  const noText = t === 'select' || t === 'textarea' || (t === 'input' && !isButtonInput);
  const text = noText ? '' : flatText(el);
  const shownText = noText ? '' : flatText(el, true);

  let imgAlt = '';
  if (!shownText) {
    const alts = [];
    descendants(el, (d) => {
      if (local(d) === 'img' && attr(d, 'alt')) alts.push(attr(d, 'alt'));
    });
    imgAlt = collapse(alts.join(' '));
  }
  let name =
    collapse(labelledName.join(' ')) ||
    collapse(ariaLabel || '') ||
    (isButtonInput ? collapse(value || (el.type === 'image' ? alt || '' : el.type === 'reset' ? 'Reset' : el.type === 'submit' ? 'Submit' : '')) : '') ||
    collapse(ownLabels.join(' ')) ||
    shownText ||
    imgAlt ||
    collapse(alt || '') ||
    collapse(title || '') ||
    collapse(placeholder || '');

  // Where a click could lead: the link or form around it, its label's control's form, and every
  // link and submit control inside it. Anything embedded leads outside every origin.
  const targets = new Set();
  let download = false;
  // A browsing context other than this one: a new window or tab (in a top document `_top` and
  // `_parent` are this one). Without its own target a link or form takes the page's base target.
  let opensWindow = false;
  const methods = new Set();
  const elsewhere = (n, own) => {
    let t = own;
    if (t === null || t === undefined || t === '') {
      const base = document.querySelector('base[target]');
      t = base ? attr(base, 'target') : '';
    }
    t = String(t || '').trim().toLowerCase();
    if (t !== '' && t !== '_self' && t !== '_top' && t !== '_parent') opensWindow = true;
  };
  const linkTargets = (a) => {
    elsewhere(a, attr(a, 'target'));
    if (ns(a) === SVG) {
      const h = a.href;
      for (const v of [h && h.baseVal, h && h.animVal]) if (v !== undefined && v !== null) targets.add(new URL(v, a.baseURI).href);
    } else {
      targets.add(a.href);
    }
    if (hasAttr(a, 'download')) download = true;
  };
  const formTargets = (n) => {
    const f = formOwner(n);
    if (!f) return;
    if (isSubmit(n) && hasAttr(n, 'formaction')) targets.add(n.formAction);
    else targets.add(FORM_ACTION.call(f));
    // Enter in a field submits through the default button, with its formaction.
    const d = isSubmit(n) ? null : defaultButton(f);
    if (d && hasAttr(d, 'formaction')) targets.add(d.formAction);
    // How it is sent and where it opens: the submitter's own formmethod and formtarget first.
    const s = isSubmit(n) ? n : d;
    methods.add(s && hasAttr(s, 'formmethod') ? s.formMethod : FORM_METHOD.call(f));
    elsewhere(f, s && hasAttr(s, 'formtarget') ? attr(s, 'formtarget') : FORM_TARGET.call(f));
  };
  // A submit control around it submits as the click's own (the ADR's "submit control around").
  for (const a of [el, ...ancestors(el)]) {
    if (isLink(a)) linkTargets(a);
    if (a !== el && isSubmit(a)) formTargets(a);
  }
  formTargets(el);
  for (const c of controls) formTargets(c);
  const embedded = (d) => {
    const dn = local(d);
    if (dn === 'iframe' || dn === 'frame' || dn === 'embed' || dn === 'object' || dn === 'map' || dn === 'portal') targets.add('about:embedded');
    if (dn === 'img' && hasAttr(d, 'usemap')) targets.add('about:embedded');
    if (dn === 'use' && ns(d) === SVG) targets.add('about:embedded');
  };
  embedded(el);
  descendants(el, (d) => {
    if (isLink(d)) linkTargets(d);
    if (isSubmit(d)) formTargets(d);
    embedded(d);
  });

  let dialog = null;
  for (const a of ancestors(el)) {
    const r = (attr(a, 'role') || '').toLowerCase();
    if (local(a) === 'dialog' || r === 'dialog' || r === 'alertdialog') {
      const ids = (attr(a, 'aria-labelledby') || '').split(/\s+/).filter(Boolean);
      const ar = rootOf(a);
      const byIdA = (id) => byIdIn(ar, id);
      dialog = collapse(ids.map(byIdA).filter(Boolean).map(flatText).join(' ')) || collapse(attr(a, 'aria-label') || '') || null;
      break;
    }
  }

  let options = [];
  let optionCount = 0;
  if (t === 'select') {
    optionCount = el.options.length;
    options = Array.from(el.options)
      .slice(0, MAX_OPTIONS)
      .map((o) => ({
        value: cut(o.value),
        label: hasAttr(o, 'label') ? cut(attr(o, 'label')) : null,
        text: cut(o.text),
        name: cut(collapse(attr(o, 'aria-label') || o.label || '')),
        title: nonEmpty(attr(o, 'title')) ? cut(attr(o, 'title')) : null,
        group_label: o.parentElement && local(o.parentElement) === 'optgroup' ? cut(o.parentElement.label) : null,
      }));
  }

  const checked =
    (t === 'input' && (el.type === 'checkbox' || el.type === 'radio') && el.checked) || attr(el, 'aria-checked') === 'true';
  const textField = (t === 'input' && TEXT_INPUTS.has(el.type)) || t === 'input' && el.type === 'search' || t === 'textarea';
  const selected = t === 'select' && el.selectedIndex >= 0 ? el.options[el.selectedIndex].text : '';
  const fact = {
    role: role || '',
    name: cut(name),
    aria_label: cut(ariaLabel),
    labelledby: labelledby.map(cut),
    labels: labels.map(cut),
    title: cut(title),
    placeholder: cut(placeholder),
    alt: cut(alt),
    value: cut(value),
    visible_text: cut(nonEmpty(text)),
    dialog_name: cut(dialog),
    field_kind: kindOf(el, role),
    options,
    option_count: optionCount,
    nav_targets: Array.from(targets).map((u) => cut(u)),
    download,
    disabled: disabledOf(el),
    submits_form: clickForms(el).length > 0,
    opens_window: opensWindow,
    // Of several forms, the method that sends the most: a body over an address, either over a dialog.
    submit_method: methods.has('post') ? 'post' : methods.has('get') ? 'get' : methods.has('dialog') ? 'dialog' : '',
  };
  fact.truncated = long;
  return {
    el,
    role: role || '',
    fact,
    visible: visible(el),
    submit_keys: submitKeys(el),
    state: {
      disabled: fact.disabled,
      checked: !!checked,
      expanded: attr(el, 'aria-expanded') === 'true' || (t === 'details' && el.open),
      selected: attr(el, 'aria-selected') === 'true',
      filled: textField ? el.value.length > 0 : t.length > 0 && editable(el) ? flatText(el).length > 0 : false,
      focused: deepActive() === el,
    },
    value: cut(selected) || '',
  };
}

// An act's read of its node ('one') takes the page as the guard reads it, so the act's before and
// after digests are one function's; a document without the guard yet has no digest, and whatever
// follows reads as a change. The other reads need no digest and walk no tree for one.
const page = mode === 'one' && globalThis.__grantLedgerGuard
  ? globalThis.__grantLedgerGuard.page()
  : { url: location.href, title: document.title, time_origin: performance.timeOrigin };
// Empty values of objects are left out of the JSON: the runtime reads an absent one as empty.
// Inside arrays every value stays, so a list keeps its length and an empty label stays a label.
const compact = function (k, v) {
  if (Array.isArray(this)) return v;
  return v === null || v === false || v === '' || (Array.isArray(v) && v.length === 0) ? undefined : v;
};
// Each snapshot's elements under a key of its own, fixed for the document's life: neither the page
// nor a later snapshot can replace them (what page script does to built-ins before this read is the
// limit named above).
const slot = (id) => Symbol.for('grant-ledger.snapshot.' + id);
// A part of a control the browser built in a shadow root of its own (a date input's spin
// buttons): the control is the node, as the page's own script sees it.
function inBrowsersTree(n) {
  for (let r = rootOf(n); r instanceof ShadowRoot; r = rootOf(HOST.call(r))) {
    const host = local(HOST.call(r));
    if (!AUTHOR_HOSTS.has(host) && !host.includes('-')) return true;
  }
  return false;
}
if (mode === 'observe') {
  // The elements the accessibility tree exposes under a role of the closed set, each with its
  // place among the arguments: the runtime names them as the tree does.
  const exposed = new Map();
  for (let i = 2; i < arguments.length; i++) exposed.set(arguments[i], i - 2);
  const els = [];
  const nodes = [];
  // Listed on the runtime's own reading alone: the runtime asks the tree how it shows these.
  const own = [];
  const listed = new Set();
  const add = (n) => {
    const d = describe(n);
    const ax = exposed.get(n);
    if (ax === undefined) own.push(n);
    else d.ax = ax;
    listed.add(n);
    els.push(d.el);
    delete d.el;
    nodes.push(d);
  };
  // A select's options are chosen through the select, within its limits: never nodes of their own.
  const option = (n) => local(n) === 'option';
  // A document between navigations can have no root element yet: it has no nodes.
  const stack = [document.documentElement];
  while (stack.length && nodes.length < MAX_NODES) {
    const n = stack.pop();
    if (!n || nodeType(n) !== 1) continue;
    if (!option(n) && (exposed.has(n) || (roleOf(n) && visible(n)))) add(n);
    const kids = flatChildren(n);
    for (let i = kids.length - 1; i >= 0; i--) stack.push(kids[i]);
  }
  // What the tree exposes beyond the walk's reach (inside a closed shadow root), in its order.
  let more = stack.length > 0;
  for (const n of exposed.keys()) {
    if (listed.has(n) || option(n) || ROOT.call(n, { composed: true }) !== document || inBrowsersTree(n)) continue;
    if (nodes.length >= MAX_NODES) {
      more = true;
      break;
    }
    add(n);
  }
  Object.defineProperty(window, slot(arguments[1]), { value: Object.freeze(els) });
  // The page's alert regions (role alert, or an assertive live region) as a person reads them:
  // how a page says that something went wrong. Bounded; the runtime quotes them as page text.
  const alerts = [];
  const ALERTS = Document.prototype.querySelectorAll.call(document, '[role~="alert"], [aria-live="assertive"]');
  for (let i = 0; i < ALERTS.length && alerts.length < MAX_ALERTS; i++) {
    const a = ALERTS[i];
    if (!visible(a)) continue;
    const text = collapse(flatText(a)).slice(0, MAX_ALERT_CHARS);
    if (text) alerts.push(text);
  }
  return [JSON.stringify({ page, nodes, more, alerts }, compact), own];
}
if (mode === 'picture') {
  // What a picture of the viewport paints over and outlines: every field with its box, kind and
  // value (the runtime decides which a card would redact), and node `arguments[2]` of snapshot
  // `arguments[1]` (-1: none). Boxes are in CSS pixels of the viewport.
  const box = (e) => {
    const r = RECT.call(e);
    return [r.left, r.top, r.width, r.height];
  };
  const shown = (b) => b[2] > 0 && b[3] > 0 && b[0] < innerWidth && b[1] < innerHeight && b[0] + b[2] > 0 && b[1] + b[3] > 0;
  // An editable region's text may paint outside its own box (height 0, overflow visible): the
  // box of its content too.
  const union = (a, b) => {
    const l = Math.min(a[0], b[0]), t = Math.min(a[1], b[1]);
    return [l, t, Math.max(a[0] + a[2], b[0] + b[2]) - l, Math.max(a[1] + a[3], b[1] + b[3]) - t];
  };
  const contents = (n) => {
    const r = document.createRange();
    r.selectNodeContents(n);
    const c = r.getBoundingClientRect();
    return [c.left, c.top, c.width, c.height];
  };
  // A value longer than this is not sent: the runtime masks it unread.
  const LONGEST = MAX * 16;
  const fields = [];
  // What the read cannot look into (another document, a plugin): painted over whole.
  const opaque = [];
  const stack = [document.documentElement];
  let walked = 0;
  while (stack.length && walked++ < MAX_NODES * 10) {
    const n = stack.pop();
    if (!n || nodeType(n) !== 1) continue;
    const t = local(n);
    const region = editable(n) && !(parentOf(n) && editable(parentOf(n)));
    if ((t === 'input' && n.type !== 'hidden') || t === 'textarea' || t === 'select' || region) {
      const b = region ? union(box(n), contents(n)) : box(n);
      if (shown(b)) {
        const value = t === 'input' || t === 'textarea' ? String(n.value || '') : t === 'select' ? '' : flatText(n);
        const long = value.length > LONGEST;
        fields.push({ box: b, kind: kindOf(n, roleOf(n)), value: long ? '' : value, long });
      }
    }
    if (t === 'iframe' || t === 'frame' || t === 'embed' || t === 'object' || t === 'portal') {
      const b = box(n);
      if (shown(b)) opaque.push(b);
    }
    const kids = flatChildren(n);
    for (let i = kids.length - 1; i >= 0; i--) stack.push(kids[i]);
  }
  let target = null;
  const kept = window[slot(arguments[1])];
  const el = arguments[2] >= 0 && Array.isArray(kept) ? kept[arguments[2]] : null;
  if (el && ROOT.call(el, { composed: true }) === document) target = box(el);
  // Past the walk's bound fields may be missed: said, never guessed. Closed shadow roots are
  // found by the runtime (`picture::closed_hosts`) and painted over whole.
  const whole = stack.length === 0;
  return [JSON.stringify({ page, width: innerWidth, height: innerHeight, fields, opaque, target, asked: !!el, whole }), null];
}
const kept = window[slot(arguments[1])];
const el = Array.isArray(kept) ? kept[arguments[2]] : null;
// Gone, or moved into another document (a frame, a document the page made): not this page's.
if (!el || ROOT.call(el, { composed: true }) !== document) return [JSON.stringify({ page, gone: true }, compact), null];
if (mode === 'form') {
  const forms = clickForms(el);
  // Two forms cannot be read back as one: the act is refused.
  if (forms.length > 1) return [JSON.stringify({ page, forms: forms.length }, compact), null];
  const form = forms[0];
  if (!form) return [JSON.stringify({ page, forms: 0 }, compact), null];
  // The submit controls the click could press: the node or an ancestor, a label's control, or
  // one inside it.
  const pressable = new Set();
  for (const a of [el, ...ancestors(el)]) {
    if (isSubmit(a)) pressable.add(a);
    if (local(a) === 'label' && a.control && isSubmit(a.control)) pressable.add(a.control);
  }
  descendants(el, (d) => {
    if (isSubmit(d)) pressable.add(d);
    if (local(d) === 'label' && d.control && isSubmit(d.control)) pressable.add(d.control);
  });
  const fields = [];
  const fieldEls = [];
  for (const e of Array.from(FORM_ELEMENTS.call(form))) {
    const t = local(e);
    if (t === 'fieldset' || t === 'object' || t === 'output') continue;
    // A button sends nothing unless it is the submitter and has a name: then it sends its own
    // name and value, which the card must show. Every submit control the click could press is
    // shown, since which one the click lands on is the page's layout.
    const button = t === 'button' || (t === 'input' && BUTTON_INPUTS.has(e.type));
    if (button && !(isSubmit(e) && e.name && pressable.has(e))) continue;
    if (button) {
      // Its name and value, as the submit sends them: nothing rendered, so the read-back and the
      // redemption's read agree on an unchanged page.
      fields.push({ label: e.name, name: e.name, kind: 'none', value: String(e.value || ''), checked: false });
      fieldEls.push(e);
      continue;
    }
    // A form-associated custom element submits what its internals hold, which no read can see.
    if (t !== 'input' && t !== 'select' && t !== 'textarea') {
      fields.push({ label: e.name || '', name: e.name || '', kind: 'other', value: '', checked: false, opaque: true });
      fieldEls.push(e);
      continue;
    }
    const d = e.type === 'hidden' ? null : describe(e);
    const kind = d ? d.fact.field_kind : 'other';
    const label = d ? d.fact.labels.join(' ') || d.fact.aria_label || d.fact.placeholder || e.name || '' : e.name || '';
    // A select shows its options' text and submits their values: both are read, so the card
    // shows what is sent and the digest binds it.
    const chosen = (o) => {
      const text = collapse(o.text || o.label || '');
      return !text || text === o.value ? o.value : text + ' (' + o.value + ')';
    };
    let value = t === 'select' ? Array.from(e.selectedOptions).map(chosen).join(', ') : String(e.value || '');
    // Sensitive values travel to the runtime whole (its digest binds them) and are redacted there.
    // How the page writes a date here: the field's language and placeholder.
    let lang = '';
    for (const a of [e, ...ancestors(e)]) {
      const l = GET_ATTR.call(a, 'lang');
      if (l !== null) {
        lang = String(l);
        break;
      }
    }
    const hint = d ? d.fact.placeholder || '' : '';
    fields.push({ label: collapse(label), name: e.name || '', kind, value, checked: !!e.checked, lang, hint });
    fieldEls.push(e);
  }
  // The fields' elements, in the same order, so the runtime can say which it typed into.
  return [JSON.stringify({ page, forms: 1, fields }, compact), fieldEls];
}
const d = describe(el);
delete d.el;
return [JSON.stringify({ page, node: d }, compact), el];
