// Preloaded into the reference servers' HTTP modes (`node --require ./loopback.cjs ...`):
// they listen on every interface by default, and tests must listen on loopback only. Every
// server socket is bound to 127.0.0.1 instead, and the address it got is printed to stderr
// as `LISTENING 127.0.0.1:PORT` so that a test can ask for port 0.
'use strict';
const net = require('net');

const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  const callbacks = args.filter((a) => typeof a === 'function');
  let options;
  if (typeof args[0] === 'object' && args[0] !== null) {
    options = { ...args[0], host: '127.0.0.1' };
  } else {
    options = { port: Number(args[0] || 0), host: '127.0.0.1' };
  }
  this.once('listening', () => {
    const a = this.address();
    if (a && typeof a === 'object') process.stderr.write(`LISTENING 127.0.0.1:${a.port}\n`);
  });
  return listen.call(this, options, ...callbacks);
};
