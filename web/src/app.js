// The dashboard's entry point: it asks who the session is and shows it.
const app = document.getElementById('app');

async function main() {
  const r = await fetch('/api/v1/session', { credentials: 'same-origin' });
  const p = document.createElement('p');
  if (r.ok) {
    const s = await r.json();
    p.textContent = `Signed in as ${s.user.name}.`;
  } else {
    p.textContent = 'Not signed in.';
  }
  app.replaceChildren(app.querySelector('h1'), p);
}

main();
