// A static file server on 127.0.0.1 (any static server works for the playground; this one
// is for the tests). `node serve.cjs <root> [port]` serves until killed; require() it for a
// function that starts one and resolves to the http.Server.
const http = require('node:http');
const fs = require('node:fs');
const path = require('node:path');

const TYPES = { '.html': 'text/html; charset=utf-8', '.js': 'text/javascript', '.css': 'text/css', '.wasm': 'application/wasm', '.json': 'application/json', '.png': 'image/png', '.ts': 'text/plain' };

function serve(root, port = 0) {
  root = path.resolve(root);
  const srv = http.createServer((req, res) => {
    const p = path.join(root, decodeURIComponent(new URL(req.url, 'http://x').pathname));
    if (p !== root && !p.startsWith(root + path.sep)) return res.writeHead(403).end();
    const f = fs.existsSync(p) && fs.statSync(p).isDirectory() ? path.join(p, 'index.html') : p;
    fs.readFile(f, (err, data) => {
      if (err) return res.writeHead(404).end('not found');
      res.writeHead(200, { 'content-type': TYPES[path.extname(f)] ?? 'application/octet-stream', 'cache-control': 'no-store' }).end(data);
    });
  });
  return new Promise((resolve) => srv.listen(port, '127.0.0.1', () => resolve(srv)));
}

module.exports = serve;
if (require.main === module) {
  serve(process.argv[2] ?? path.join(__dirname, '../playground'), Number(process.argv[3] ?? 8080)).then((s) =>
    console.log(`playground on http://127.0.0.1:${s.address().port}/`));
}
