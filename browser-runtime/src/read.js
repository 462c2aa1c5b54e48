// The runtime's one read of a page, sent with every observe and every act so that both read the
// same way. `arguments[0]` is "observe" (every node of the flat tree, kept in the page under the
// snapshot id `arguments[1]`), "one" (node `arguments[2]` of snapshot `arguments[1]`, read again
// and returned as a WebDriver element reference for the act) or "form" (the fields of that
// node's form). The facts travel as one JSON string without empty values: far cheaper for the
// driver than an object graph, and element references are made only for the one node acted on.
//
// Deny-biased on purpose: hidden text counts as text, a label source longer than MAX is carried
// cut with a mark, and anything that could send the click elsewhere is a navigation target.
//
// This runs in the page's own script world, so a page that replaces DOM built-ins can lie to it;
// every check is made on the element that is then acted on, and the request fence below the DOM
// is what bounds such a page (see ARCHITECTURE.md).
const mode = arguments[0];
const KEY = Symbol.for('grant-ledger.snapshot');
const FORM_ELEMENTS = Object.getOwnPropertyDescriptor(HTMLFormElement.prototype, 'elements').get;
const FORM_ACTION = Object.getOwnPropertyDescriptor(HTMLFormElement.prototype, 'action').get;
const MAX = 1024;
const MAX_NODES = 10000;
const MAX_OPTIONS = 4097;
const SVG = 'http://www.w3.org/2000/svg';
const XLINK = 'http://www.w3.org/1999/xlink';
const ROLES = new Set([
  'button', 'link', 'checkbox', 'radio', 'option', 'tab', 'menuitem', 'combobox', 'textbox', 'searchbox', 'listbox',
]);
const BLOCK = new Set([
  'address', 'article', 'aside', 'blockquote', 'br', 'dd', 'div', 'dl', 'dt', 'fieldset', 'figcaption', 'figure',
  'footer', 'form', 'h1', 'h2', 'h3', 'h4', 'h5', 'h6', 'header', 'hr', 'li', 'main', 'nav', 'ol', 'p', 'pre',
  'section', 'table', 'td', 'th', 'tr', 'ul',
]);
const BUTTON_INPUTS = new Set(['button', 'submit', 'reset', 'image']);
const TEXT_INPUTS = new Set(['', 'text', 'email', 'tel', 'url', 'number', 'password']);
const IDENTITY = /\b(name|given-name|family-name|additional-name|honorific-prefix|honorific-suffix|nickname|username|bday|bday-day|bday-month|bday-year|sex|street-address|address-line1|address-line2|address-line3|postal-code|country|country-name|tel|tel-national|email)\b/;

// The flat tree the browser renders: open shadow roots instead of their host's children, and a
// slot's assigned nodes (or its fallback) in its place.
function flatChildren(n) {
  if (n.nodeType === 1 && n.shadowRoot) return n.shadowRoot.childNodes;
  if (n.nodeType === 1 && n.localName === 'slot') {
    const assigned = n.assignedNodes();
    if (assigned.length) return assigned;
  }
  return n.childNodes;
}
function flatParent(n) {
  if (n.assignedSlot) return n.assignedSlot;
  const p = n.parentNode;
  if (p && p.nodeType === 11) return p.host || null;
  return p && p.nodeType === 1 ? p : null;
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
    if (n.nodeType !== 1) continue;
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
  if (n.hidden || n.getAttribute('aria-hidden') === 'true') return true;
  return n.checkVisibility ? !n.checkVisibility({ visibilityProperty: true }) : false;
}
function flatText(root, shown) {
  const out = [];
  let len = 0;
  const walk = (n) => {
    if (len > MAX * 4) return;
    if (n.nodeType === 3) {
      out.push(n.data);
      len += n.data.length;
      return;
    }
    if (n.nodeType !== 1) return;
    const t = n.localName;
    if (t === 'script' || t === 'style' || t === 'template') return;
    if (shown && hiddenElement(n)) return;
    const block = BLOCK.has(t);
    if (block) out.push(' ');
    for (const c of flatChildren(n)) walk(c);
    if (block) out.push(' ');
  };
  for (const c of flatChildren(root)) walk(c);
  return collapse(out.join(''));
}

function isLink(n) {
  if (n.namespaceURI === SVG) return n.localName === 'a' && (n.hasAttribute('href') || n.hasAttributeNS(XLINK, 'href'));
  return (n.localName === 'a' || n.localName === 'area') && n.hasAttribute('href');
}
// The control's own type, as the browser reads it: an unknown `type` on a button is a submit.
function isSubmit(n) {
  if (n.localName === 'button' && n.namespaceURI === 'http://www.w3.org/1999/xhtml') return n.type === 'submit';
  return n.localName === 'input' && (n.type === 'submit' || n.type === 'image');
}
// The button an implicit submission (Enter in a field) presses: the form's first submit control.
function defaultButton(f) {
  for (const c of FORM_ELEMENTS.call(f)) if (isSubmit(c)) return c;
  return null;
}
function formOwner(n) {
  if ('form' in n && n.form instanceof HTMLFormElement) return n.form;
  const id = n.getAttribute && n.getAttribute('form');
  if (id) {
    const root = n.getRootNode();
    const f = root.getElementById ? root.getElementById(id) : null;
    if (f instanceof HTMLFormElement) return f;
  }
  for (let p = n.parentNode; p && p.nodeType === 1; p = p.parentNode) if (p.localName === 'form') return p;
  return null;
}

function roleOf(el) {
  const explicit = (el.getAttribute('role') || '').trim().split(/\s+/)[0].toLowerCase();
  if (explicit) return ROLES.has(explicit) ? explicit : null;
  const t = el.localName;
  if (isLink(el)) return 'link';
  if (el.namespaceURI !== 'http://www.w3.org/1999/xhtml') return null;
  if (t === 'button' || t === 'summary') return 'button';
  if (t === 'input') {
    const ty = el.type;
    if (BUTTON_INPUTS.has(ty) || ty === 'file') return 'button';
    if (ty === 'checkbox' || ty === 'radio') return ty;
    if (ty === 'search') return 'searchbox';
    if (TEXT_INPUTS.has(ty)) return 'textbox';
    return null;
  }
  if (t === 'textarea') return 'textbox';
  if (t === 'select') return el.multiple || el.size > 1 ? 'listbox' : 'combobox';
  if (el.isContentEditable && el.getAttribute('contenteditable') !== null) return 'textbox';
  return null;
}

function kindOf(el, role) {
  const t = el.localName;
  const ac = (el.getAttribute('autocomplete') || '').toLowerCase();
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
  if (el.isContentEditable) return 'editable_region';
  if (role === 'checkbox' || role === 'radio' || role === 'option') return 'custom_choice';
  if (role === 'textbox' || role === 'searchbox' || role === 'combobox' || role === 'listbox') return 'other';
  return 'none';
}

function disabledOf(el) {
  if (el.matches(':disabled')) return true;
  if (el.getAttribute('aria-disabled') === 'true') return true;
  return ancestors(el).some((a) => a.getAttribute('aria-disabled') === 'true');
}
function deepActive() {
  let a = document.activeElement;
  while (a && a.shadowRoot && a.shadowRoot.activeElement) a = a.shadowRoot.activeElement;
  return a;
}
function visible(el) {
  const r = el.getBoundingClientRect();
  if (r.width === 0 && r.height === 0 && el.localName !== 'option') return false;
  return el.checkVisibility ? el.checkVisibility({ visibilityProperty: true }) : true;
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
  const root = el.getRootNode();
  const byId = (id) => (root.getElementById ? root.getElementById(id) : document.getElementById(id));
  const targetsOf = (el.getAttribute('aria-labelledby') || '').split(/\s+/).filter(Boolean).map(byId).filter(Boolean);
  // Each target's name for the accessible name; its text and its aria-label both as sources.
  const labelledName = targetsOf.map((t) => nonEmpty(t.getAttribute('aria-label')) || flatText(t, true));
  const labelledby = [];
  for (const t of targetsOf) {
    labelledby.push(flatText(t));
    if (nonEmpty(t.getAttribute('aria-label'))) labelledby.push(t.getAttribute('aria-label'));
  }
  const labelTexts = (c) => (c.labels ? Array.from(c.labels).map((l) => flatText(l)) : []);
  const ownLabels = labelTexts(el);
  let labels = ownLabels;
  // A click inside a label changes the label's control: its labels are this element's too.
  const controls = [];
  for (const a of [el, ...ancestors(el)]) {
    if (a.localName === 'label' && a.control && a.control !== el) controls.push(a.control);
  }
  if (el.localName === 'label' && el.control) controls.push(el.control);
  for (const c of controls) labels = labels.concat(labelTexts(c));

  const t = el.localName;
  const isButtonInput = t === 'input' && BUTTON_INPUTS.has(el.type);
  const value = t === 'button' || isButtonInput ? nonEmpty(el.getAttribute('value')) : null;
  const alt = nonEmpty(el.getAttribute('alt'));
  const ariaLabel = nonEmpty(el.getAttribute('aria-label'));
  const title = nonEmpty(el.getAttribute('title'));
  const placeholder = nonEmpty(el.getAttribute('placeholder'));
  const noText = t === 'select' || t === 'textarea' || (t === 'input' && !isButtonInput);
  const text = noText ? '' : flatText(el);
  const shownText = noText ? '' : flatText(el, true);

  let imgAlt = '';
  if (!shownText) {
    const alts = [];
    descendants(el, (d) => {
      if (d.localName === 'img' && d.getAttribute('alt')) alts.push(d.getAttribute('alt'));
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
  const linkTargets = (a) => {
    if (a.namespaceURI === SVG) {
      const h = a.href;
      for (const v of [h && h.baseVal, h && h.animVal]) if (v !== undefined && v !== null) targets.add(new URL(v, a.baseURI).href);
    } else {
      targets.add(a.href);
    }
    if (a.hasAttribute('download')) download = true;
  };
  const formTargets = (n) => {
    const f = formOwner(n);
    if (!f) return;
    if (isSubmit(n) && n.hasAttribute('formaction')) targets.add(n.formAction);
    else targets.add(FORM_ACTION.call(f));
    // Enter in a field submits through the default button, with its formaction.
    const d = isSubmit(n) ? null : defaultButton(f);
    if (d && d.hasAttribute('formaction')) targets.add(d.formAction);
  };
  for (const a of [el, ...ancestors(el)]) if (isLink(a)) linkTargets(a);
  formTargets(el);
  for (const c of controls) formTargets(c);
  const embedded = (d) => {
    const dn = d.localName;
    if (dn === 'iframe' || dn === 'frame' || dn === 'embed' || dn === 'object' || dn === 'map' || dn === 'portal') targets.add('about:embedded');
    if (dn === 'img' && d.hasAttribute('usemap')) targets.add('about:embedded');
    if (dn === 'use' && d.namespaceURI === SVG) targets.add('about:embedded');
  };
  embedded(el);
  descendants(el, (d) => {
    if (isLink(d)) linkTargets(d);
    if (isSubmit(d)) formTargets(d);
    embedded(d);
  });

  let dialog = null;
  for (const a of ancestors(el)) {
    const r = (a.getAttribute('role') || '').toLowerCase();
    if (a.localName === 'dialog' || r === 'dialog' || r === 'alertdialog') {
      const ids = (a.getAttribute('aria-labelledby') || '').split(/\s+/).filter(Boolean);
      const ar = a.getRootNode();
      const byIdA = (id) => (ar.getElementById ? ar.getElementById(id) : null);
      dialog = collapse(ids.map(byIdA).filter(Boolean).map(flatText).join(' ')) || collapse(a.getAttribute('aria-label') || '') || null;
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
        label: o.hasAttribute('label') ? cut(o.getAttribute('label')) : null,
        text: cut(o.text),
        name: cut(collapse(o.getAttribute('aria-label') || o.label || '')),
        title: nonEmpty(o.getAttribute('title')) ? cut(o.getAttribute('title')) : null,
        group_label: o.parentElement && o.parentElement.localName === 'optgroup' ? cut(o.parentElement.label) : null,
      }));
  }

  const checked =
    (t === 'input' && (el.type === 'checkbox' || el.type === 'radio') && el.checked) || el.getAttribute('aria-checked') === 'true';
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
  };
  fact.truncated = long;
  return {
    el,
    role: role || '',
    fact,
    visible: visible(el),
    state: {
      disabled: fact.disabled,
      checked: !!checked,
      expanded: el.getAttribute('aria-expanded') === 'true' || (t === 'details' && el.open),
      selected: el.getAttribute('aria-selected') === 'true',
      filled: textField ? el.value.length > 0 : t.length > 0 && el.isContentEditable ? flatText(el).length > 0 : false,
      focused: deepActive() === el,
    },
    value: cut(selected) || '',
  };
}

const page = {
  url: location.href,
  title: document.title,
  time_origin: performance.timeOrigin,
  sig: document.getElementsByTagName('*').length + ':' + (document.body ? document.body.textContent.length : 0),
};
// Empty values are left out of the JSON: the runtime reads an absent one as empty.
const compact = (k, v) => (v === null || v === false || v === '' || (Array.isArray(v) && v.length === 0) ? undefined : v);
if (mode === 'observe') {
  const els = [];
  const nodes = [];
  const stack = [document.documentElement];
  while (stack.length && nodes.length < MAX_NODES) {
    const n = stack.pop();
    if (n.nodeType !== 1) continue;
    if (roleOf(n) && n.localName !== 'option' && visible(n)) {
      const d = describe(n);
      els.push(d.el);
      delete d.el;
      nodes.push(d);
    }
    const kids = flatChildren(n);
    for (let i = kids.length - 1; i >= 0; i--) stack.push(kids[i]);
  }
  // The snapshot's elements stay in the page; the next observe replaces them.
  window[KEY] = { id: arguments[1], els };
  return JSON.stringify({ page, nodes, more: stack.length > 0 }, compact);
}
const reg = window[KEY];
const el = reg && reg.id === arguments[1] ? reg.els[arguments[2]] : null;
if (!el || !el.isConnected) return [JSON.stringify({ page, gone: true }, compact), null];
if (mode === 'form') {
  const form = formOwner(el);
  if (!form) return [JSON.stringify({ page }, compact), null];
  const SECRET = new Set(['password', 'one_time_code', 'payment']);
  const fields = [];
  const fieldEls = [];
  for (const e of Array.from(FORM_ELEMENTS.call(form))) {
    const t = e.localName;
    if (t === 'fieldset' || t === 'object' || t === 'output' || t === 'button') continue;
    if (t === 'input' && BUTTON_INPUTS.has(e.type)) continue;
    const d = e.type === 'hidden' ? null : describe(e);
    const kind = d ? d.fact.field_kind : 'other';
    const label = d ? d.fact.labels.join(' ') || d.fact.aria_label || d.fact.placeholder || e.name || '' : e.name || '';
    let value = t === 'select' ? Array.from(e.selectedOptions).map((o) => o.text).join(', ') : String(e.value || '');
    if (SECRET.has(kind) && value) value = '[REDACTED]';
    fields.push({ label: collapse(label), name: e.name || '', kind, value, checked: !!e.checked });
    fieldEls.push(e);
  }
  // The fields' elements, in the same order, so the runtime can say which it typed into.
  return [JSON.stringify({ page, fields }, compact), fieldEls];
}
const d = describe(el);
delete d.el;
return [JSON.stringify({ page, node: d }, compact), el];
