// The owner's console: the inbox of chats, and one chat's task, cards, task permission's banner
// and activity, kept current by the gateway's event stream. Every string from a website reaches
// the page as text (textContent), never as markup.
'use strict';

const session = document.body.dataset.session;
const base = '/v1/sessions/' + encodeURIComponent(session || '');
const state = { csrf: null, cards: new Map(), grants: new Map(), shown: new Map(), rows: [], chat: null, sites: [], connected: false, notified: new Set() };

// Times in the owner's own zone, named: "14:32 CET"; a day other than today adds the date.
function clock(iso) {
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return '';
  const sameDay = d.toDateString() === new Date().toDateString();
  const opts = { hour: '2-digit', minute: '2-digit', timeZoneName: 'short' };
  if (!sameDay) Object.assign(opts, { day: 'numeric', month: 'short' });
  return d.toLocaleString([], opts);
}

// "until 14:32 CET, 28 minutes left"
function until(iso) {
  const left = Math.max(0, Math.round((Date.parse(iso) - Date.now()) / 60000));
  const words = left < 1 ? 'less than a minute left' : left === 1 ? '1 minute left' : left + ' minutes left';
  return 'until ' + clock(iso) + ', ' + words;
}

const $ = (id) => document.getElementById(id);

// An element with text and children; attributes set as properties' plain strings.
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') e.className = v;
    else e.setAttribute(k, v);
  }
  for (const c of children) {
    if (c === null || c === undefined || c === '') continue;
    e.append(typeof c === 'string' ? document.createTextNode(c) : c);
  }
  return e;
}

// A string from the website: quoted, and said to be the website's.
function fromSite(text) {
  return el('q', { class: 'site', title: 'Text from the website' }, text);
}

function say(text) {
  $('status').textContent = text;
}

async function call(method, path, body) {
  const headers = { accept: 'application/json' };
  if (body !== undefined) headers['content-type'] = 'application/json';
  if (method !== 'GET' && state.csrf) headers['x-csrf-token'] = state.csrf;
  const r = await fetch(path, {
    method,
    headers,
    credentials: 'same-origin',
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const json = await r.json().catch(() => ({}));
  if (!r.ok) {
    const field = FIELD_WORDS[json.field] || '';
    // The record's code before a detail is the export's, not the owner's.
    const detail = (json.detail || '').replace(/^[A-Z_]+: /, '');
    const said = detail ? (field ? field + ' ' : '') + detail : '';
    const e = new Error(said || STATUS_WORDS[r.status] || 'the console could not do that (' + r.status + ')');
    e.status = r.status;
    throw e;
  }
  return json;
}

// What a refusal's field is, in the owner's words.
const FIELD_WORDS = { goal: 'What the agent should do', subgoals: 'The steps', start_url: 'The start page', minutes: 'How long the key lasts' };
const STATUS_WORDS = {
  401: 'you are signed out: open a new sign-in link',
  403: 'your sign-in may not do that',
  404: 'that is not there, or not yours',
  503: 'a part of the system does not answer now: try again in a moment',
};

const KINDS = { click: 'Click', type: 'Type', select: 'Choose', check: 'Tick', press: 'Press a key', scroll: 'Scroll' };

function detailLabel(kind) {
  return { type: 'Text to type', press: 'Key', select: 'Option', scroll: 'Scroll by' }[kind] || 'Detail';
}

const ROW_STATUS = {
  match: 'Matches the task',
  mismatch: 'Differs from the task',
  untouched: 'Not filled by the agent: the page’s own value',
  redacted: 'Hidden: a sensitive field',
  chosen: 'Set by the agent in this task',
};

// The read-back in two sections, as the seed's card has it: the fields the agent filled, then the
// fields it never touched that hold a value (a page default, autofill, a leftover), counted.
function formReview(rows) {
  const untouched = rows.filter((r) => r.status === 'untouched' && r.value !== '' && r.value !== 'not checked');
  const filled = rows.filter((r) => !untouched.includes(r));
  const parts = [formTable(filled, 'The form as the page holds it now, beside your task')];
  if (untouched.length) {
    parts.push(
      formTable(
        untouched,
        untouched.length === 1
          ? '1 field the agent never filled, which the form will send as it is'
          : untouched.length + ' fields the agent never filled, which the form will send as they are',
      ),
    );
  }
  return el('div', { class: 'form-sections' }, ...parts);
}

function formTable(rows, caption) {
  const body = el('tbody');
  for (const r of rows) {
    const status =
      r.status === 'match_normalised'
        ? 'Matches (normalised: ' + (r.normalisation || 'a rule') + ')'
        : ROW_STATUS[r.status] || 'Unknown';
    body.append(
      el(
        'tr',
        { class: 'row-' + r.status },
        el('th', { scope: 'row' }, fromSite(r.label || '(no label)')),
        el('td', { 'data-label': 'On the page' }, r.value === '' ? 'Empty' : fromSite(r.value)),
        el('td', { 'data-label': 'Your task' }, r.record_field_id ? r.record_value || '' : '—'),
        el('td', { 'data-label': 'Check' }, status),
      ),
    );
  }
  return el(
    'table',
    { class: 'form-review' },
    el('caption', {}, caption),
    el(
      'thead',
      {},
      el('tr', {}, ...['Field', 'On the page', 'Your task', 'Check'].map((h) => el('th', { scope: 'col' }, h))),
    ),
    body,
  );
}

function card(a) {
  const v = a.view || {};
  const title = el('h3', { id: 'card-' + a.approval_id, tabindex: '-1' }, v.action_summary || 'The agent asks to act');
  const facts = el('dl', { class: 'facts' });
  const fact = (name, ...value) => facts.append(el('dt', {}, name), el('dd', {}, ...value));
  fact('Action', KINDS[v.action_kind] || v.action_kind || 'unknown');
  if (v.element_name) fact('On', (v.element_role || 'element') + ' ', fromSite(v.element_name));
  if (v.visible_text && v.visible_text !== v.element_name) fact('Visible text', fromSite(v.visible_text));
  if (v.dialog_name) fact('In the dialog', fromSite(v.dialog_name));
  fact('Page', (v.page_origin || '') + (v.page_path || ''));
  if (v.page_title) fact('Page title', fromSite(v.page_title));
  // Where the act leads: the only places, besides this page, the browser may load while it runs.
  if ((v.destinations || []).length) {
    const list = el('ul', { class: 'destinations' });
    for (const d of v.destinations) {
      list.append(el('li', { class: 'to-' + d.kind }, d.words, d.origin ? ' ' : '', d.origin ? el('span', { class: 'where' }, d.origin + ' ', fromSite(d.path)) : null));
    }
    fact('Leads to', list);
  } else if (v.describable && (v.action_kind === 'click' || v.action_kind === 'check')) {
    // The runtime lets such an act load nothing but this page while it runs.
    fact('Leads to', 'No other page: while it runs, the browser may load nothing but this page’s address.');
  }
  if (v.sends) fact('Sends', v.sends);
  if (v.new_window) fact('Opens', 'A new window or tab.');
  if (v.reads_as) fact('What it looks like', v.reads_as);
  if (v.detail) fact(detailLabel(v.action_kind), v.action_kind === 'type' ? v.detail : fromSite(v.detail));

  const section = el('article', { class: 'card', 'aria-labelledby': title.id }, title, facts);
  if (!v.describable) {
    section.append(el('p', { class: 'warn' }, 'The page could not be read whole: look at it yourself before you allow this.'));
  }
  if (v.cannot_undo) section.append(el('p', { class: 'warn' }, 'You may not be able to undo this.'));
  section.append(el('p', { class: 'expiry', 'data-expires': a.expires_at }, expiryWords(a.expires_at)));
  if (a.reason_text) section.append(el('p', { class: 'reason' }, a.reason_text));
  if (v.form) section.append(formReview(v.form));
  section.append(liveTab(a));

  const buttons = el('div', { class: 'choices' });
  const answer = (label, body, cls) => {
    const b = el('button', { type: 'button', class: cls || '' }, ...[].concat(label));
    b.addEventListener('click', () => resolve(a, body, buttons));
    buttons.append(b);
    return b;
  };
  if (v.form) {
    answer('Approve submit', { resolution: 'approve_once' }, 'primary');
    answer('Reject and escalate', { resolution: 'deny' });
    answer('Take over', { resolution: 'take_over' });
    section.append(
      el('p', { class: 'choices-said' },
        'Approve submit sends this form once, as shown. Reject and escalate ends the agent’s task here: the form is not sent. ' +
          'Take over stops the agent and gives you the browser tab.'),
    );
  } else {
    // With no task permission on offer the card is for this one act alone, and its button says
    // exactly what happens once, the element's name quoted as the website's; nothing on such a
    // card is the default.
    const once = !a.offer && v.action_kind === 'click' && v.element_name
      ? ['Press ', fromSite(v.element_name), ' once']
      : 'Allow once';
    answer(once, { resolution: 'approve_once' });
    if (a.offer) {
      const o = a.offer;
      section.append(
        el(
          'div',
          { class: 'offer' },
          el('p', {}, 'Allow for this task: the agent may act in this chat on ', el('strong', {}, o.origin + o.path_prefix),
            ' for ' + o.minutes + ' minutes, up to ' + o.max_actions + ' actions and ' + o.max_typed_chars +
            ' typed characters, without asking you again.'),
          o.text ? el('p', { class: 'offer-text' }, o.text) : null,
        ),
      );
      answer('Allow for this task', {
        resolution: 'approve_for_task',
        offered_origin: o.origin,
        offered_path_prefix: o.path_prefix,
      }, 'primary');
    }
    answer('Deny', { resolution: 'deny' });
    answer('Take over the tab', { resolution: 'take_over' });
    section.append(
      el('p', { class: 'choices-said' }, 'Take over stops the agent and gives you the browser tab: you act in it yourself.'),
    );
  }
  section.append(buttons);
  return section;
}

// The browser tab the card's session acts in, as the browser shows it now (never a picture the
// agent made): read from the runtime through the gateway while the card is pending.
function liveTab(a) {
  const img = el('img', { class: 'live', alt: 'The browser tab' });
  img.hidden = true;
  const lead = el('span', {}, 'Loading the picture of the browser tab…');
  const page = el('span', { class: 'live-page' });
  const note = el('span', { class: 'live-note' });
  const what = (a.view && a.view.action_summary) || 'this card';
  const again = el('button', { type: 'button', class: 'refresh', 'aria-label': 'Show the browser tab again for: ' + what }, 'Show it again');
  const caption = el('figcaption', {}, lead, page, ' ', note, again);
  const show = async () => {
    lead.textContent = 'Loading the picture of the browser tab…';
    (page.textContent = ''), (note.textContent = '');
    const shown = await showPicture(a.approval_id, img, page, undefined, note);
    if (shown.failed) {
      lead.textContent = 'No picture of the browser tab: ' + shown.failed;
      return;
    }
    const at = new Date().toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', second: '2-digit' });
    lead.textContent = shown.dialog === null ? 'The browser tab as it was at ' + at : 'At ' + at;
    img.alt = 'The browser tab as it was at ' + at + (shown.page ? ' on ' + shown.page : '') + '. ' + note.textContent;
  };
  again.addEventListener('click', show);
  show();
  return el('figure', { class: 'live-tab' }, img, caption);
}

// What the picture marks, in the owner's words: the act's element, and the private fields covered.
const ELEMENT_WORDS = {
  outlined: 'The part the agent would act on is outlined in orange and left bright; the rest of the page is dimmed. ',
  'not-in-view': 'What the agent would act on is outside the part of the page shown here; the browser checks it again before acting. ',
  gone: 'What the agent asked to act on is no longer on the page: the action will be refused if you allow it. ',
};

// Why there is no picture, in the owner's words, from the gateway's answer.
async function noPictureWords(r) {
  if (r.status === 404) return 'this console is not connected to the browser.';
  if (r.status === 503) return 'the browser cannot be reached now. Try again in a moment.';
  try {
    const p = await r.json();
    if (p && p.detail) return p.detail + '.';
  } catch (e) {
    // Not a problem document: the status alone says it.
  }
  return 'the browser did not give one (' + r.status + ').';
}

// The live picture of a card's tab into `img`, and the page it shows (its origin and path, which
// the runtime read) into `page`: the owner sees which site the picture is of. While the page shows
// a dialog (alert, confirm, prompt) there is no picture: its text goes to `dialog`, quoted as the
// website's. Answers what it shows: the picture's page ('' when none), the dialog's text (null
// when none), and why there is no picture (`failed`).
async function showPicture(approvalId, img, page, dialog, note) {
  try {
    const r = await fetch('/v1/approvals/' + encodeURIComponent(approvalId) + '/live?at=' + Date.now(), {
      credentials: 'same-origin',
    });
    if (!r.ok) {
      img.hidden = true;
      return { page: '', dialog: null, failed: await noPictureWords(r) };
    }
    const shown = await shownIn(r, img, page, dialog);
    if (note && shown.dialog === null) {
      const hidden = Number(r.headers.get('x-live-masked-fields') || 0);
      const covered =
        r.headers.get('x-live-masked') !== 'yes'
          ? ''
          : hidden === 0
            ? 'No private field is on this part of the page.'
            : hidden === 1
              ? 'One private field or embedded part of the page (a password, a card number, a frame) is hidden under a grey box.'
              : hidden + ' private fields or embedded parts of the page (passwords, card numbers, frames) are hidden under grey boxes.';
      // Said once the picture is on screen, never beside an empty frame.
      await img.decode().catch(() => {});
      note.textContent = (ELEMENT_WORDS[r.headers.get('x-live-element')] || '') + covered;
    }
    return shown;
  } catch (e) {
    img.hidden = true;
    page.textContent = '';
    if (note) note.textContent = '';
    return { page: '', dialog: null, failed: 'the gateway cannot be reached now.' };
  }
}

// A live reply (a picture, or a dialog's text) shown in `img`, `page` and `dialog`.
async function shownIn(r, img, page, dialog) {
  if ((r.headers.get('content-type') || '').startsWith('application/json')) {
    const d = await r.json();
    img.hidden = true;
    page.textContent = '';
    if (dialog) {
      dialog.querySelector('.said').replaceChildren(fromSite(d.dialog));
      dialog.hidden = false;
    } else {
      page.append(': the page shows a dialog, ', fromSite(d.dialog));
    }
    return { page: '', dialog: d.dialog };
  }
  if (dialog) dialog.hidden = true;
  const at = r.headers.get('x-live-page') || '';
  const url = URL.createObjectURL(await r.blob());
  const old = img.src;
  img.src = url;
  img.hidden = false;
  if (old.startsWith('blob:')) URL.revokeObjectURL(old);
  page.textContent = at ? ' on ' + at : '';
  return { page: at, dialog: null };
}

// The tab the owner took over: its picture, where a click is sent as a click at that point of
// the page, and text and named keys sent to whatever the page has focused. "Done" closes it.
// `page` is the page of the picture on screen (a click is refused if the tab has left it), and
// `dialog` the text of the page's dialog on screen (an answer names it).
const takeover = { id: null, page: '', dialog: null, queue: Promise.resolve(), sending: 0, timer: null };

function takeOver(approvalId) {
  takeover.id = approvalId;
  takeover.page = '';
  $('takeover-tab').hidden = true;
  $('takeover').hidden = false;
  showTab();
  // The page moves on its own too (a timer, a load): the picture follows it, a second apart,
  // while no input of the owner's is on its way.
  takeover.timer = setInterval(() => {
    if (takeover.id && takeover.sending === 0) showTab();
  }, 1000);
  $('takeover').scrollIntoView({ block: 'start' });
  $('takeover').focus();
}

async function showTab() {
  if (!takeover.id) return;
  shown(await showPicture(takeover.id, $('takeover-tab'), $('takeover-page'), $('takeover-dialog')));
}

function shown(what) {
  takeover.page = what.page;
  takeover.dialog = what.dialog;
}

// After a reload the panel comes back for the newest card taken over whose tab is still open.
async function resumeTakeover() {
  try {
    const all = (await call('GET', base + '/approvals')).approvals;
    const taken = all.filter((a) => a.status === 'TAKEN_OVER').sort((a, b) => (a.expires_at < b.expires_at ? 1 : -1));
    if (!taken.length || takeover.id) return;
    const r = await fetch('/v1/approvals/' + encodeURIComponent(taken[0].approval_id) + '/live?at=' + Date.now(), {
      credentials: 'same-origin',
    });
    if (r.ok) {
      say('You still have the tab you took over.');
      takeOver(taken[0].approval_id);
    }
  } catch (e) {
    // Nothing to resume: the panel stays closed.
  }
}

// Inputs go one after another, in the order the owner made them.
function sendToTab(input) {
  takeover.queue = takeover.queue.then(() => send(input));
  return takeover.queue;
}

async function send(input) {
  if (!takeover.id) return;
  takeover.sending += 1;
  try {
    const r = await fetch('/v1/approvals/' + encodeURIComponent(takeover.id) + '/live/input', {
      method: 'POST',
      credentials: 'same-origin',
      headers: { 'content-type': 'application/json', 'x-csrf-token': state.csrf || '' },
      body: JSON.stringify(input),
    });
    if (r.status === 409) {
      const why = (await r.json().catch(() => ({}))).detail || 'the tab changed';
      say('Not sent: ' + why + '.');
      await showTab();
      return;
    }
    if (!r.ok) throw new Error((await r.json().catch(() => ({}))).detail || r.status);
    if (input.done) {
      clearInterval(takeover.timer);
      $('takeover').hidden = true;
      takeover.id = null;
      say('The tab is closed.');
    } else if (r.status === 200) {
      shown(await shownIn(r, $('takeover-tab'), $('takeover-page'), $('takeover-dialog')));
    }
  } catch (e) {
    say('The tab did not take it: ' + e.message);
  } finally {
    takeover.sending -= 1;
  }
}

function wireTakeover() {
  const img = $('takeover-tab');
  if (!img) return;
  img.addEventListener('click', (e) => {
    // The picture is scaled to the page's width: its own pixels are the page's.
    const box = img.getBoundingClientRect();
    const x = Math.round(((e.clientX - box.left) * img.naturalWidth) / box.width);
    const y = Math.round(((e.clientY - box.top) * img.naturalHeight) / box.height);
    if (!takeover.page) return say('Wait for the picture of the tab, then click on it.');
    sendToTab({ click: { x, y }, page: takeover.page });
  });
  // OK or Cancel name the dialog on screen: a dialog the owner has not seen is never answered.
  const dialog = $('takeover-dialog');
  for (const [label, accept] of [['OK', true], ['Cancel', false]]) {
    const b = el('button', { type: 'button' }, label);
    b.addEventListener('click', () => {
      if (takeover.dialog === null) return;
      const text = $('takeover-answer').value;
      const answer = { accept, seen: takeover.dialog };
      if (accept && text) answer.text = text;
      takeover.dialog = null;
      sendToTab({ answer }).then(() => ($('takeover-answer').value = ''));
    });
    dialog.querySelector('.choices').append(b);
  }
  $('takeover-type').addEventListener('submit', (e) => {
    e.preventDefault();
    const text = $('takeover-text').value;
    if (text) sendToTab({ text }).then(() => ($('takeover-text').value = ''));
  });
  const keys = $('takeover-keys');
  for (const key of ['Enter', 'Tab', 'Backspace', 'Escape']) {
    const b = el('button', { type: 'button' }, key);
    b.addEventListener('click', () => sendToTab({ key }));
    keys.append(b);
  }
  const done = el('button', { type: 'button', class: 'primary' }, 'Done: close the tab');
  done.addEventListener('click', () => sendToTab({ done: true }));
  keys.append(done);
}

async function resolve(a, body, buttons) {
  for (const b of buttons.querySelectorAll('button')) b.disabled = true;
  const shown = state.shown.get(a.approval_id);
  try {
    const r = await call('POST', '/v1/approvals/' + encodeURIComponent(a.approval_id) + '/resolve', {
      ...body,
      shown_for_ms: shown === undefined ? undefined : Math.round(performance.now() - shown),
    });
    state.cards.delete(a.approval_id);
    if (r.status === 'TAKEN_OVER') {
      say('You have the tab: the agent has stopped.');
      takeOver(a.approval_id);
    } else {
      say(r.status === 'APPROVED' ? (r.grant_id ? 'Allowed for this task.' : 'Allowed once.') : 'Denied.');
    }
    renderCards();
    // Focus goes on: to the next card waiting, else to what was said.
    if (r.status !== 'TAKEN_OVER') {
      const next = $('cards').querySelector('article.card:not(.withdrawn) h3');
      (next || $('status')).focus();
    }
  } catch (e) {
    say('Your answer was not taken: ' + e.message);
    for (const b of buttons.querySelectorAll('button')) b.disabled = false;
  }
}

// How long a card still waits, in words: it is answered, withdrawn or expired after that.
function expiryWords(expiresAt) {
  const left = Date.parse(expiresAt) - Date.now();
  if (!(left > 0)) return 'This card has expired: the action will not run.';
  const minutes = Math.floor(left / 60000);
  const then = ' If you do not answer, the action will not run.';
  return (minutes < 1 ? 'Less than a minute left to answer.' : 'About ' + minutes + (minutes === 1 ? ' minute' : ' minutes') + ' left to answer.') + then;
}

// A card whose run stopped waiting: it says so, and nothing on it answers.
function withdrawnCard(a) {
  const v = a.view || {};
  const title = el('h3', { id: 'card-' + a.approval_id }, v.action_summary || 'The agent asked to act');
  return el(
    'article',
    { class: 'card withdrawn', 'aria-labelledby': title.id },
    title,
    el('p', { class: 'reason' }, 'Withdrawn: the agent stopped waiting for your answer. This action will not run.'),
  );
}

// Each card as last drawn, by id: a card whose data did not change keeps its element (its
// picture, focus and scroll), so one card's news does not reload every other card's picture.
const drawn = new Map();

function drawnCard(a, make) {
  const key = JSON.stringify(a);
  const had = drawn.get(a.approval_id);
  if (had && had.key === key) return had.node;
  const node = make(a);
  drawn.set(a.approval_id, { key, node });
  return node;
}

function renderCards() {
  const box = $('cards');
  const live = (a) => Date.parse(a.expires_at) > Date.now();
  const pending = [...state.cards.values()].filter((a) => a.status === 'PENDING' && live(a));
  const withdrawn = [...state.cards.values()].filter((a) => a.status === 'WITHDRAWN' && live(a));
  const shown = [...pending.map((a) => drawnCard(a, card)), ...withdrawn.map((a) => drawnCard(a, withdrawnCard))];
  const ids = new Set([...pending, ...withdrawn].map((a) => a.approval_id));
  for (const id of [...drawn.keys()]) if (!ids.has(id)) drawn.delete(id);
  const emptyWords = state.connected
    ? 'Nothing is waiting for you.'
    : 'Not connected to the gateway: cards that arrive now are not shown here until it is back.';
  const empty = box.querySelector(':scope > p.empty') || el('p', { class: 'empty' });
  empty.textContent = emptyWords;
  const nodes = shown.length ? shown : [empty];
  // Only what moved is moved: the others stay where they are.
  nodes.forEach((n, i) => {
    if (box.children[i] !== n) box.insertBefore(n, box.children[i] || null);
  });
  while (box.children.length > nodes.length) box.lastElementChild.remove();
  for (const a of pending) {
    if (!state.shown.has(a.approval_id)) {
      state.shown.set(a.approval_id, performance.now());
      notify(a);
    }
  }
  document.title = (pending.length ? '(' + pending.length + ') ' : '') + 'Chat ' + session + ' · grant-ledger';
}

function renderBanner() {
  const active = [...state.grants.values()].filter((g) => g.status === 'active');
  const banner = $('banner');
  const task = state.chat && state.chat.task;
  const runEnded = task && (task.state === 'ended' || task.state === 'done');
  // Drawn again only when something but the time left changed: its Stop keeps focus.
  const key = JSON.stringify([active.map((g) => g.grant_id), runEnded]);
  if (banner.dataset.key === key) {
    const set = (cls, texts) =>
      banner.querySelectorAll(cls).forEach((m, i) => {
        if (m.textContent !== texts[i]) m.textContent = texts[i];
      });
    set('.minutes', active.map((g) => until(g.expires_at)));
    set('.actions', active.map((g) => g.actions_used + ' of ' + g.max_actions + ' actions used'));
    set('.chars', active.map((g) => g.max_typed_chars - g.chars_used + ' characters left to type'));
    return;
  }
  banner.dataset.key = key;
  banner.replaceChildren(
    ...active.map((g) => {
      const stop = el('button', { type: 'button', class: 'stop' }, runEnded ? 'End the task permission now' : 'Stop this task permission');
      stop.addEventListener('click', () => stopGrant(g.grant_id, stop));
      return el(
        'div',
        { class: 'grant' },
        el('p', {}, 'Task permission on ', el('strong', {}, g.origin + g.path_prefix)),
        el(
          'p',
          { class: 'counts' },
          el('span', { class: 'minutes' }, until(g.expires_at)),
          el('span', { class: 'actions' }, g.actions_used + ' of ' + g.max_actions + ' actions used'),
          el('span', { class: 'chars' }, g.max_typed_chars - g.chars_used + ' characters left to type'),
        ),
        runEnded ? el('p', { class: 'reason' }, 'The agent’s task has ended, but this permission is still live.') : null,
        stop,
      );
    }),
  );
  banner.hidden = active.length === 0;
}

// Whether the permission is stopped; says so either way.
async function stopGrant(id, button) {
  if (button) button.disabled = true;
  try {
    await call('POST', '/v1/browser-task-grants/' + encodeURIComponent(id) + '/revoke', {});
    const g = state.grants.get(id);
    if (g) state.grants.set(id, { ...g, status: 'ended', end_reason: 'revoked' });
    say('The task permission is stopped: the next action asks you again.');
    renderBanner();
    return true;
  } catch (e) {
    say('The permission was not stopped: ' + e.message);
    if (button) button.disabled = false;
    return false;
  }
}

// Stops the agent in every chat of the owner's: each chat's permission ends, its waiting cards are
// denied and its run ends at its next action, until the owner writes to it again. A failure is
// never reported as done.
async function stopEverything() {
  const button = $('stop-all');
  button.disabled = true;
  try {
    const r = await call('POST', '/v1/stop-everything', {});
    const n = r.sessions;
    say(
      'Everything is stopped (' + n + (n === 1 ? ' chat' : ' chats') + ' stopped now). ' +
        'The agent does nothing more until you write to it again.',
    );
  } catch (e) {
    say('Not everything was stopped: ' + e.message + ' Press “Stop everything, in every chat” again.');
  } finally {
    button.disabled = false;
  }
}

function inRange(row) {
  // The owner's own calendar day, as the date fields are.
  const d = new Date(row.recorded_at);
  const day = d.getFullYear() + '-' + String(d.getMonth() + 1).padStart(2, '0') + '-' + String(d.getDate()).padStart(2, '0');
  const since = $('since').value;
  const until = $('until').value;
  return (!since || day >= since) && (!until || day <= until);
}

// Why the agent stopped, in the owner's words (the record's codes stay in the export).
const ESCALATED = {
  ambiguous_target: 'two things on the page fit the step, and it will not guess',
  no_grounded_action: 'nothing on the page fits the step',
  unmapped_field: 'the page has a field it cannot match to your task',
  unexpected_form_state: 'the form holds a value it did not put there',
  suspected_injection: 'the page seems to give it orders',
  auth_required: 'the site asks to sign in',
  approval_rejected: 'you said no to one of its actions',
  uncertain: 'it is not sure what to do',
  approval_timeout: 'nobody answered its card in time',
  budget_exhausted: 'it used all the steps it may take',
  name_mismatch: 'the page changed under it: what it meant to press has another name now',
  no_progress: 'its last actions changed nothing',
  policy_denied: 'a rule of this deployment forbids that action',
  repeated_snapshot: 'the page stopped changing',
  taken_over: 'you took the tab over',
  terminal_refusal: 'the browser refused an action, so it ends here',
  page_error: 'the page shows an error',
  service_error: 'a part of the system did not answer',
  stopped_by_owner: 'you stopped it',
  outcome_unknown: 'it could not tell whether its last action went through',
};
const ENDED = {
  expired: 'its time ran out',
  exhausted: 'its actions ran out',
  revoked: 'you stopped it',
  superseded: 'a new one replaced it',
  profile_changed: 'someone signed in again in this browser',
  profile_revoked: 'the browser profile was removed',
  policy_changed: 'the rules changed',
  agent_changed: 'the agent changed',
  scope_removed: 'the site is no longer set up for tasks',
};
const ALLOWED = {
  'Allowed by task permission': 'Allowed by your task permission',
  'Allowed by standing permission': 'Allowed by the standing permission',
  'Allowed by the owner': 'Allowed by you',
  'Allowed by policy': 'Allowed by a policy',
};
const VERBS = { click: 'Clicked', type: 'Typed into', select: 'Chose in', check: 'Ticked', press: 'Pressed a key on', scroll: 'Scrolled', snapshot: 'Looked at the page', screenshot: 'Took a picture of the page', request_approval: 'Asked you about', escalate: 'Stopped to ask you' };

// The act a summary names, without the record's use count.
const acted = (summary) => summary.replace(/ \(use \d+\)$/, '');

// A row as the owner would say it: `null` for the record's own bookkeeping.
function rowWords(r, byApproval) {
  const s = r.summary;
  switch (r.event_type) {
    case 'tool.call.authorized':
      return { who: ALLOWED[r.authorization] || r.authorization, what: acted(s) };
    case 'approval.requested':
      return { what: 'Asked you: ' + s.replace(/^Asked the owner: /, '').replace(/ \(not covered: [^)]*\)$/, '') };
    case 'approval.resolved':
      if (s.startsWith('Withdrawn')) return { what: 'A card was withdrawn: the agent stopped waiting, and its action did not run' };
      return { what: { 'Allowed for this task': 'You allowed it for the task', 'Allowed once': 'You allowed it once', Denied: 'You said no' }[s] || 'You took the tab over' };
    case 'approval.token_redeemed': {
      const asked = byApproval.get(r.approval_id);
      return { who: 'Allowed by you', what: asked ? asked.replace(/^Asked the owner: /, '').replace(/ \(not covered: [^)]*\)$/, '') : 'The action you allowed went ahead' };
    }
    case 'approval.token_issued':
    case 'task.claimed':
      // A worker's own bookkeeping; a task picked up again after its worker stopped is said.
      return r.summary.includes('taken over by worker') ? { what: 'The agent picked your task up again' } : null;
    case 'approval.expired':
      return { what: 'A card waited too long unanswered: its action did not run' };
    case 'browser.task_grant.created': {
      const m = s.match(/^Task permission on (\S+) .* until (\S+)$/);
      return { what: m ? 'Your task permission on ' + m[1] + ' began, until ' + clock(m[2]) : 'Your task permission began' };
    }
    case 'browser.task_grant.ended': {
      const reason = s.replace(/^Task permission ended: /, '');
      return { what: 'Your task permission ended: ' + (ENDED[reason] || reason) };
    }
    case 'run.started':
      return { what: 'The agent started working' };
    case 'run.stepped': {
      const m = s.match(/^Run \S+ step (\d+): (\S+) → (\S+)/);
      const said = s.match(/evidence: (\w+) \\?"(.*?)\\?" ref=/);
      if (!m) return { what: 'The agent took a step' };
      const verb = VERBS[m[2]] || m[2];
      const on = said && !['snapshot', 'screenshot', 'escalate'].includes(m[2]) ? [' ', said[1] + ' ', fromSite(said[2])] : [];
      return { what: ['Step ' + m[1] + ': ' + verb, ...on] };
    }
    case 'run.refused':
      return { what: 'The agent tried something it may not do; it was stopped before the browser' };
    case 'run.escalated': {
      const m = s.match(/^Run \S+ escalated: ([a-z_]+)/);
      const cites = s.match(/; said (".*?")(;|$)/);
      return { what: ['The agent stopped and needs you: ', ESCALATED[m && m[1]] || 'it asks for you', cites ? ['. It said ', fromSite(JSON.parse(cites[1]))] : ''].flat() };
    }
    case 'run.completed': {
      const m = s.match(/reference (.*)$/);
      return { what: ['The agent finished: the page shows the reference ', fromSite(m ? m[1] : '')] };
    }
    case 'task.started': {
      const m = s.match(/^Task (started|continued) by the owner: (".*?") from (\S+)$/);
      if (!m) return { what: 'You started a task' };
      return { what: [m[1] === 'started' ? 'You started a task: ' : 'You told it to continue: ', JSON.parse(m[2]), ' (from ' + m[3] + ')'] };
    }
    case 'session.message_recorded':
      return { what: s === 'Message from the owner' ? 'You wrote to the agent' : 'Someone else wrote in this chat' };
    case 'session.created':
      return { what: 'This chat began' };
    case 'session.stopped':
      return { what: 'You stopped the agent here: it does nothing until you write again' };
    case 'session.tool_called':
      return { what: 'The agent used a tool outside the browser' };
    default:
      return { what: s.replace(/\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b/g, '').trim() };
  }
}

function renderActivity() {
  const rows = state.rows.filter(inRange);
  const byApproval = new Map();
  for (const r of state.rows) if (r.event_type === 'approval.requested' && r.approval_id) byApproval.set(r.approval_id, r.summary);
  const items = [];
  for (const r of rows) {
    let w;
    try {
      w = rowWords(r, byApproval);
    } catch (e) {
      // A row whose text does not read as expected is shown as the record has it.
      w = { what: r.summary };
    }
    if (!w) continue;
    items.push(
      el(
        'li',
        { class: w.who ? 'authorized' : '' },
        el('time', { datetime: r.recorded_at }, clock(r.recorded_at)),
        ' ',
        w.who ? el('strong', {}, w.who + ': ') : null,
        ...[].concat(w.what),
      ),
    );
  }
  $('activity').replaceChildren(...items);
}

async function loadActivity() {
  try {
    state.rows = (await call('GET', base + '/activity')).rows;
    renderActivity();
  } catch (e) {
    say('The activity could not be read: ' + e.message);
  }
}

function exportActivity() {
  const lines = state.rows.filter(inRange).map((r) => JSON.stringify(r)).join('\n');
  const a = el('a', { download: 'activity-' + session + '.jsonl' });
  a.href = URL.createObjectURL(new Blob([lines + '\n'], { type: 'application/x-ndjson' }));
  document.body.append(a);
  a.click();
  a.remove();
}

// Each card's time left, kept current; a card whose time ran out leaves the list.
function tick() {
  renderBanner();
  let ended = false;
  for (const p of document.querySelectorAll('#cards .expiry')) {
    p.textContent = expiryWords(p.dataset.expires);
    if (!(Date.parse(p.dataset.expires) > Date.now())) ended = true;
  }
  if (ended) {
    renderCards();
    say('A card expired before you answered it: its action did not run.');
  }
}

function listen() {
  const events = new EventSource(base + '/events');
  const approval = (e) => {
    const a = JSON.parse(e.data);
    state.cards.set(a.approval_id, a);
    renderCards();
  };
  const grant = (e) => {
    const g = JSON.parse(e.data);
    state.grants.set(g.grant_id, g);
    renderBanner();
  };
  events.addEventListener('approval.pending', approval);
  events.addEventListener('approval.resolved', approval);
  events.addEventListener('grant.changed', grant);
  events.addEventListener('grant.ended', grant);
  events.addEventListener('activity.changed', () => {
    loadActivity();
    loadChats();
  });
  // Each connection opens with the session's pending cards and active permissions: what was
  // answered or ended while it was closed is dropped, not left on screen.
  events.addEventListener('open', () => {
    state.connected = true;
    state.cards.clear();
    state.grants.clear();
    renderCards();
    renderBanner();
    if ($('status').dataset.offline) say('');
    delete $('status').dataset.offline;
  });
  events.addEventListener('error', () => {
    state.connected = false;
    renderCards();
    offline();
  });
}

// The gateway cannot be reached, or no longer knows this browser: said, never shown as calm.
async function offline() {
  $('status').dataset.offline = 'yes';
  try {
    await call('GET', '/v1/me');
    say('Reconnecting to the gateway…');
  } catch (e) {
    signedOutOrDown(e);
  }
}

function signedOutOrDown(e) {
  $('status').dataset.offline = 'yes';
  // Whatever the event stream says, the cards on screen may be stale now.
  state.connected = false;
  if (session) renderCards();
  if (e.status === 401) {
    say('You are signed out. Nothing here is current. Open a new sign-in link to go on (grantctl owners link prints one).');
    for (const id of ['stop-all', 'sign-out', 'notify']) $(id).hidden = true;
    $('who').textContent = 'Signed out';
    if (!session) $('chats').replaceChildren(el('li', { class: 'empty' }, 'Sign in to see your chats.'));
  } else {
    say('The console cannot reach the gateway. What you see may be out of date; it tries again every few seconds.');
  }
}

// The owner's chats: what waits in each, newest task first.
function chatItem(c) {
  const link = el('a', { href: '/sessions/' + encodeURIComponent(c.session_id) }, c.task ? c.task.goal : 'Chat ' + c.session_id);
  const notes = el('ul', { class: 'notes' });
  const note = (cls, ...text) => notes.append(el('li', { class: cls }, ...text));
  if (c.waiting_cards) note('waiting', c.waiting_cards === 1 ? '1 card waits for your answer' : c.waiting_cards + ' cards wait for your answer');
  if (c.stopped) note('stopped', 'Stopped: the agent does nothing here until you write to it');
  if (c.task) {
    const words = { waiting: 'Waiting for the agent to start', running: 'The agent is working on it', ended: 'Stopped before it was done', done: 'Done' }[c.task.state] || '';
    note('task', words + ' · started ' + clock(c.task.started_at));
  } else {
    note('', c.has_browser ? 'No task yet' : 'No browser: tasks cannot run in this chat');
  }
  if (c.permission) note('permission', 'Task permission ' + until(c.permission.expires_at) + ', ' + c.permission.actions_used + ' actions used');
  return el('li', { class: 'chat' + (c.waiting_cards ? ' has-cards' : '') }, el('p', { class: 'chat-name' }, link, c.task ? ' (chat ' + c.session_id + ')' : ''), notes);
}

async function loadChats() {
  let r;
  try {
    r = await call('GET', '/v1/chats');
  } catch (e) {
    signedOutOrDown(e);
    return;
  }
  if ($('status').dataset.offline) {
    say('');
    delete $('status').dataset.offline;
    state.connected = true;
    if (session) renderCards();
  }
  state.sites = r.sites;
  if (!session) {
    const list = $('chats');
    // Redrawn only when it changed: a live region read out every few seconds is noise.
    const items = r.chats.length
      ? r.chats.map(chatItem)
      : [el('li', { class: 'empty' }, 'You have no chats yet. A chat is made by the app you talk to the agent in.')];
    // Only an item whose words changed is replaced: the rest keep focus and are not read again.
    items.forEach((item, i) => {
      const had = list.children[i];
      if (!had || had.textContent !== item.textContent) {
        if (had) had.replaceWith(item);
        else list.append(item);
      }
    });
    while (list.children.length > items.length) list.lastElementChild.remove();
    const waiting = r.chats.reduce((n, c) => n + c.waiting_cards, 0);
    const more = state.waiting !== undefined && waiting > state.waiting;
    state.waiting = waiting;
    if (more) notifyCount(waiting);
    document.title = (waiting ? '(' + waiting + ') ' : '') + 'Your chats · grant-ledger';
    return;
  }
  state.chat = r.chats.find((c) => c.session_id === session) || null;
  renderTask();
  renderBanner();
}

// This chat's task, and what the owner can say to it.
function renderTask() {
  const c = state.chat;
  const now = $('task-now');
  const form = $('task-form');
  if (!c) {
    now.textContent = 'This chat does not exist, or it is not yours.';
    form.hidden = true;
    $('continue').hidden = true;
    $('stop-chat').hidden = true;
    return;
  }
  const t = c.task;
  const stateWords = {
    waiting: 'waiting for the agent to start',
    running: 'the agent is working on it',
    ended: 'it stopped before it was done (the activity below says why)',
    done: 'done',
  };
  now.replaceChildren(
    ...(t
      ? ['Your task: ', el('strong', {}, t.goal), ' (started ' + clock(t.started_at) + '): ' + (stateWords[t.state] || t.state) + '.']
      : [c.has_browser ? 'No task yet: write one below.' : 'This chat has no browser, so no task can run in it.']),
    c.stopped ? ' You stopped the agent here: it does nothing until you write to it.' : '',
  );
  // While a Stop is on its way, nothing lifts it: its answer would come after the owner's next word.
  $('continue').hidden = state.stopping || !t || t.state === 'done' || (t.state !== 'ended' && !c.stopped);
  $('continue').textContent = c.stopped ? 'Lift the Stop and run the task again' : 'Run the task again';
  $('stop-chat').hidden = c.stopped;
  form.hidden = !c.has_browser;
  const list = $('task-sites');
  list.replaceChildren(...state.sites.map((u) => el('option', { value: u + '/' })));
  $('task-sites-said').textContent = state.sites.length
    ? 'The start page must be on a site set up for tasks: ' + state.sites.join(', ') + '.'
    : 'No site is set up for tasks on this deployment, so no task can start.';
  if (!$('task-start').value && state.sites.length) $('task-start').value = state.sites[0] + '/';
}

async function startTask(e) {
  e.preventDefault();
  const button = $('task-form').querySelector('button[type=submit]');
  button.disabled = true;
  try {
    const steps = $('task-steps').value.split('\n').map((l) => l.trim()).filter((l) => l);
    // One id per task written: sending it again after a lost answer starts nothing more.
    const form = $('task-form');
    if (!form.dataset.message) form.dataset.message = 'web-' + Date.now().toString(36) + '-' + Math.random().toString(36).slice(2, 10);
    await call('POST', base + '/tasks', {
      goal: $('task-goal').value.trim(),
      subgoals: steps,
      start_url: $('task-start').value.trim(),
      message_id: form.dataset.message,
    });
    delete form.dataset.message;
    say('Your task is sent: the agent starts on it in a moment. Its cards appear here.');
    $('task-goal').value = '';
    $('task-steps').value = '';
    await loadChats();
  } catch (err) {
    say('The task did not start: ' + err.message);
  } finally {
    button.disabled = false;
  }
}

async function continueTask() {
  const b = $('continue');
  b.disabled = true;
  try {
    await call('POST', base + '/continue', {});
    say('You told the agent to continue.');
    await loadChats();
  } catch (err) {
    say('The agent was not told to continue: ' + err.message);
  } finally {
    b.disabled = false;
  }
}

async function stopChat() {
  const b = $('stop-chat');
  b.disabled = true;
  state.stopping = true;
  renderTask();
  try {
    await call('POST', base + '/stop', {});
    say('The agent is stopped in this chat: its permission ended, its cards are denied, and it does nothing until you write to it.');
    await loadChats();
  } catch (err) {
    say('The agent was not stopped: ' + err.message + ' Press the button again.');
  } finally {
    b.disabled = false;
    state.stopping = false;
    renderTask();
  }
}

// Off until the owner turns it on here, and then only as the browser allows.
function notifyOn() {
  return localStorage.getItem('grant-ledger-notify') === 'on' && 'Notification' in window && Notification.permission === 'granted';
}

function renderNotify() {
  const b = $('notify');
  if (!('Notification' in window)) return;
  b.hidden = false;
  const on = notifyOn();
  b.setAttribute('aria-pressed', String(on));
  b.textContent = on ? 'Stop telling me when a card arrives' : 'Tell me when a card arrives';
}

async function toggleNotify() {
  if (notifyOn()) {
    localStorage.setItem('grant-ledger-notify', 'off');
  } else {
    const answer = Notification.permission === 'granted' ? 'granted' : await Notification.requestPermission();
    if (answer === 'granted') {
      localStorage.setItem('grant-ledger-notify', 'on');
      say('You will be told when a card arrives, even while this page is in the background.');
    } else {
      say('The browser does not allow this page to notify you; you can change that in its site settings.');
    }
  }
  renderNotify();
}

// Told once per card, and only of a card asked after this page opened.
const opened = Date.now();
const CARD_LIFE_MS = 10 * 60 * 1000;

function notifyCount(waiting) {
  if (!notifyOn()) return;
  const body = waiting === 1 ? '1 card waits for your answer' : waiting + ' cards wait for your answer';
  if (systemNotice('A card waits for you', { body, tag: 'inbox' })) told();
}

// A system notification, if this browser makes them here; never an error of the page's.
function systemNotice(title, options) {
  try {
    return new Notification(title, options);
  } catch (e) {
    return null;
  }
}

function told() {
  const p = $('notified');
  p.textContent = 'You were told of a new card at ' + clock(new Date().toISOString()) + '.';
  p.hidden = false;
}

function notify(a) {
  if (Date.parse(a.expires_at) - CARD_LIFE_MS < opened - 2000) return;
  if (!notifyOn() || state.notified.has(a.approval_id)) return;
  state.notified.add(a.approval_id);
  const what = (a.view && a.view.action_summary) || 'The agent asks to act';
  const n = systemNotice('A card waits for you', { body: what, tag: a.approval_id });
  if (!n) return;
  n.addEventListener('click', () => window.focus());
  told();
}

async function signOut() {
  try {
    await call('POST', '/v1/sign-out', {});
    location.assign('/');
  } catch (e) {
    say('You are not signed out: ' + e.message);
  }
}

// Agent apps: keys for MCP clients to drive this chat's browser, made, listed and revoked here.
async function loadAgents() {
  let r;
  try {
    r = await call('GET', base + '/agents');
  } catch (e) {
    return;
  }
  const list = $('agents');
  list.replaceChildren();
  let gone = 0;
  for (const a of r.agents) {
    if (a.revoked_at || Date.parse(a.expires_at) <= Date.now()) {
      gone += 1;
      continue;
    }
    const words = a.browser_only ? 'no other tools' : 'may have other tools: you allow its actions one at a time';
    const until = new Date(a.expires_at).toLocaleString(undefined, {
      day: 'numeric', month: 'short', hour: '2-digit', minute: '2-digit', timeZoneName: 'short',
    });
    const li = el('li', {}, 'An app starting at ' + a.start_url + ' (' + words + '), usable until ' + until + '. ');
    const b = el('button', { type: 'button' }, 'Disconnect this app');
    b.addEventListener('click', () => disconnectAgent(a.agent_id, b));
    li.append(b);
    list.append(li);
  }
  if (gone > 0) list.append(el('li', { class: 'empty' }, gone + (gone === 1 ? ' earlier key has' : ' earlier keys have') + ' ended or been disconnected.'));
}

async function connectAgent(e) {
  e.preventDefault();
  const button = $('agent-connect').querySelector('button[type=submit]');
  button.disabled = true;
  try {
    const body = {
      browser_only: $('agent-browser-only').checked,
      start_url: $('agent-start').value,
      minutes: Number($('agent-minutes').value),
    };
    const r = await call('POST', base + '/agents', body);
    $('agent-key-text').value = r.key;
    $('agent-record').textContent =
      'What it may type comes from its task record, mcp-' + r.agent_id + '.json in your task records folder.';
    $('agent-key').hidden = false;
    $('agent-key-text').focus();
    $('agent-key-text').select();
    say('A key is made. Copy it now: it is not shown again.');
    loadAgents();
  } catch (err) {
    say('No key was made: ' + err.message);
  } finally {
    button.disabled = false;
  }
}

async function disconnectAgent(id, button) {
  button.disabled = true;
  try {
    await call('POST', '/v1/agents/' + encodeURIComponent(id) + '/disconnect', {});
    say(
      'The agent app is disconnected: its next call is refused. ' +
        "A task permission in this chat stays until it runs out or you press Stop on its banner.",
    );
    $('agent-key').hidden = true;
    $('agent-key-text').value = '';
    loadAgents();
  } catch (err) {
    say('The app was not disconnected: ' + err.message);
    button.disabled = false;
  }
}

function wire() {
  $('stop-all').addEventListener('click', stopEverything);
  $('sign-out').addEventListener('click', signOut);
  $('notify').addEventListener('click', toggleNotify);
}

async function start() {
  let me;
  try {
    me = await call('GET', '/v1/me');
  } catch (e) {
    if (session) renderCards();
    signedOutOrDown(e);
    // Offline: try again until the gateway answers.
    if (e.status !== 401) setTimeout(start, 5000);
    return;
  }
  if (state.started) return;
  state.started = true;
  state.csrf = me.csrf_token;
  $('who').textContent = 'Signed in as ' + me.principal;
  $('stop-all').hidden = false;
  $('sign-out').hidden = me.signed_in_by !== 'session';
  renderNotify();
  setInterval(loadChats, 5000);
  loadChats();
  if (!session) return;
  $('since').addEventListener('change', renderActivity);
  $('until').addEventListener('change', renderActivity);
  $('export').addEventListener('click', exportActivity);
  $('agent-connect').addEventListener('submit', connectAgent);
  $('task-form').addEventListener('submit', startTask);
  $('continue').addEventListener('click', continueTask);
  $('stop-chat').addEventListener('click', stopChat);
  wireTakeover();
  listen();
  loadActivity();
  loadAgents();
  resumeTakeover();
  setInterval(tick, 15000);
}

wire();
start();
