// A stand-in for the property API behind Envoy in the docker-compose demo: answers the three categories'
// endpoints with small JSON bodies, with the methods envoy/envoy.yaml counts (GET and HEAD read, POST, PUT,
// PATCH and DELETE write, OPTIONS for CORS preflight). Not part of Tollgate.
import { createServer } from 'node:http';

const port = Number(process.env.PORT ?? 3000);
const host = process.env.HOST ?? '127.0.0.1';

const routes = [
  [/^\/modules(\/.*)?$/, () => ({ modules: [{ id: 1, name: 'Accounting' }, { id: 2, name: 'Maintenance' }] })],
  [/^\/invoices(\/.*)?$/, () => ({ invoices: [{ id: 'INV-1', amount: 1200 }, { id: 'INV-2', amount: 850 }] })],
  [/^\/reports\/.+$/, (path) => ({ report: path.split('/')[2], rows: 3 })],
];

createServer((req, res) => {
  const path = (req.url ?? '/').split('?')[0];
  let status = 200;
  let body;
  if (req.method === 'OPTIONS') {
    req.resume();
    res.writeHead(204, { allow: 'GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS' });
    res.end();
    return;
  }
  // HEAD answers as GET does; Node's server leaves the body out.
  if (req.method === 'GET' || req.method === 'HEAD') {
    const hit = routes.find(([re]) => re.test(path));
    body = hit ? hit[1](path) : { error: 'not found' };
    if (!hit) status = path === '/healthz' ? 200 : 404;
    if (path === '/healthz') body = { status: 'ok' };
  } else if (['POST', 'PUT', 'PATCH', 'DELETE'].includes(req.method ?? '')) {
    status = req.method === 'POST' ? 201 : 200;
    body = { ok: true, method: req.method, path };
  } else {
    status = 405;
    body = { error: 'method not allowed' };
  }
  req.resume();
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}).listen(port, host, () => console.log(`property API demo on ${host}:${port}`));
