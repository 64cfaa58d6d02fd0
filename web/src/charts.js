// Line charts with uPlot, loaded on first use (the jobs page never pays for
// it). Series are downsampled to at most MAX_POINTS points by min/max buckets:
// each bucket keeps its lowest and highest point in x order, so spikes survive.
export const MAX_POINTS = 2000;
let loading = null;

export function loadUPlot() {
  if (window.uPlot) return Promise.resolve(window.uPlot);
  if (!loading) {
    loading = new Promise((resolve, reject) => {
      const css = document.createElement('link');
      css.rel = 'stylesheet';
      css.href = '/assets/uPlot.min.css';
      document.head.appendChild(css);
      const s = document.createElement('script');
      s.src = '/assets/uPlot.iife.min.js';
      s.onload = () => resolve(window.uPlot);
      s.onerror = () => reject(new Error('could not load the chart library'));
      document.head.appendChild(s);
    });
  }
  return loading;
}

// downsample(xs, ys, max): [xs', ys'] with at most max points (min/max buckets).
export function downsample(xs, ys, max = MAX_POINTS) {
  const n = xs.length;
  if (n <= max) return [xs, ys];
  const buckets = Math.floor(max / 2);
  const size = n / buckets;
  const ox = [];
  const oy = [];
  for (let b = 0; b < buckets; b++) {
    const lo = Math.floor(b * size);
    const hi = Math.min(n, Math.floor((b + 1) * size));
    let iMin = -1;
    let iMax = -1;
    for (let i = lo; i < hi; i++) {
      const y = ys[i];
      if (y === null || y === undefined || Number.isNaN(y)) continue;
      if (iMin < 0 || y < ys[iMin]) iMin = i;
      if (iMax < 0 || y > ys[iMax]) iMax = i;
    }
    if (iMin < 0) continue;
    const [a, c] = iMin <= iMax ? [iMin, iMax] : [iMax, iMin];
    ox.push(xs[a]); oy.push(ys[a]);
    if (c !== a) { ox.push(xs[c]); oy.push(ys[c]); }
  }
  return [ox, oy];
}

function width(el) {
  return Math.max(240, Math.min(900, (el.clientWidth || 600) - 8));
}

// A chart of one or more series over a shared x: lineChart(el, title, xLabel, names).
// Returns {set(xs, [ys...]), destroy()}.
export async function lineChart(el, title, xLabel, names) {
  const uPlot = await loadUPlot();
  const colors = ['#2563eb', '#dc2626', '#059669', '#d97706', '#7c3aed', '#db2777'];
  // Canvas text cannot use currentColor: take the page's colours (light or dark theme).
  const fg = getComputedStyle(document.documentElement).color;
  const grid = {stroke: 'rgba(128,128,128,0.25)', width: 1};
  const opts = {
    title, width: width(el), height: 220, legend: {show: false},
    scales: {x: {time: false}},
    axes: [{label: xLabel, stroke: fg, grid}, {stroke: fg, grid}],
    series: [{label: xLabel}].concat(names.map((n, i) => ({label: n, stroke: colors[i % colors.length], width: 1.5}))),
  };
  const plot = new uPlot(opts, [[], ...names.map(() => [])], el);
  const onResize = () => plot.setSize({width: width(el), height: 220});
  window.addEventListener('resize', onResize);
  return {
    set(xs, ys) { plot.setData([xs, ...ys]); },
    destroy() { window.removeEventListener('resize', onResize); plot.destroy(); },
  };
}
