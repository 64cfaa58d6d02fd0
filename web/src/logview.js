// A virtual log view: only the rows in sight are in the DOM, so 50,000 lines
// scroll as fast as 50. Rows are a fixed height; a spacer gives the scrollbar
// its full length. Search marks matches by splitting text nodes around <mark>.
import {h, clear} from './dom.js';

const ROW = 18;  // px, matches .log-row in style.css

export class LogView {
  constructor(label) {
    this.lines = [];       // {rank, text}
    this.visible = [];     // indices into lines passing the rank filter
    this.rank = '';
    this.needle = '';
    this.follow = true;
    this.spacer = h('div', {class: 'log-spacer'});
    this.rows = h('div', {class: 'log-rows'});
    this.el = h('div', {class: 'log-view', tabindex: '0', role: 'log', 'aria-label': label}, this.spacer, this.rows);
    this.el.addEventListener('scroll', () => {
      this.follow = this.el.scrollTop + this.el.clientHeight >= this.el.scrollHeight - ROW * 2;
      this.schedule();
    });
    this.pending = false;
  }

  append(rank, text) {
    this.lines.push({rank, text});
    if (this.rank === '' || String(rank) === this.rank) this.visible.push(this.lines.length - 1);
    this.schedule();
  }

  setRank(rank) {
    this.rank = rank;
    this.visible = [];
    this.lines.forEach((l, i) => { if (rank === '' || String(l.rank) === rank) this.visible.push(i); });
    this.schedule();
  }

  setSearch(needle) {
    this.needle = needle;
    this.schedule();
  }

  // The indices (in the filtered view) of lines that match the search.
  matches() {
    if (!this.needle) return [];
    const n = this.needle.toLowerCase();
    const out = [];
    this.visible.forEach((li, i) => { if (this.lines[li].text.toLowerCase().includes(n)) out.push(i); });
    return out;
  }

  scrollToRow(i) {
    this.follow = false;
    this.el.scrollTop = Math.max(0, i * ROW - this.el.clientHeight / 2);
    this.draw();
  }

  schedule() {
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => { this.pending = false; this.draw(); });
  }

  draw() {
    this.spacer.style.height = this.visible.length * ROW + 'px';
    this.el.dataset.lines = String(this.lines.length);
    if (this.follow) this.el.scrollTop = this.el.scrollHeight;
    const first = Math.max(0, Math.floor(this.el.scrollTop / ROW) - 5);
    const last = Math.min(this.visible.length, Math.ceil((this.el.scrollTop + this.el.clientHeight) / ROW) + 5);
    this.rows.style.transform = `translateY(${first * ROW}px)`;
    clear(this.rows);
    const frag = document.createDocumentFragment();
    for (let i = first; i < last; i++) {
      const line = this.lines[this.visible[i]];
      const row = h('div', {class: 'log-row'}, h('span', {class: 'log-rank'}, `[${line.rank}] `));
      this.highlight(row, line.text);
      frag.appendChild(row);
    }
    this.rows.appendChild(frag);
  }

  highlight(row, text) {
    const n = this.needle.toLowerCase();
    if (!n) {
      row.appendChild(document.createTextNode(text));
      return;
    }
    const lower = text.toLowerCase();
    let at = 0;
    for (let i = lower.indexOf(n); i >= 0; i = lower.indexOf(n, at)) {
      if (i > at) row.appendChild(document.createTextNode(text.slice(at, i)));
      row.appendChild(h('mark', {}, text.slice(i, i + n.length)));
      at = i + n.length;
    }
    if (at < text.length) row.appendChild(document.createTextNode(text.slice(at)));
  }
}
