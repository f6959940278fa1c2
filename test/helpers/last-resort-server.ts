/**
 * A process for the last-resort test (test/unit/decode/last-resort.test.ts): an HTTP server whose
 * requests run in the decode service's request scope (services/decode/last-resort.ts). `/throw`
 * throws from a timer callback, outside any promise; `/reject` leaves a rejection unhandled;
 * `/outside` throws from a callback started outside any request; anything else answers 200.
 * Prints its port on stdout.
 */
import http from "node:http";
import type { AddressInfo } from "node:net";
import { inRequestScope, installLastResort } from "../../services/decode/last-resort.ts";

installLastResort((msg) => process.stderr.write(`${msg.split("\n")[0]}\n`));
const server = http.createServer((req, res) =>
  inRequestScope(
    () => {
      res.writeHead(500).end("last resort");
    },
    () => {
      if (req.url === "/throw") setTimeout(() => {
        throw new Error("thrown in a callback");
      }, 5);
      else if (req.url === "/reject") {
        void Promise.reject(new Error("nobody handles this"));
        res.end("ok");
      } else if (req.url === "/outside") {
        throwOutside = true;
        res.end("ok");
      } else res.end("ok");
    },
  ),
);
// A timer started before any request: its callbacks run in no request's scope.
let throwOutside = false;
setInterval(() => {
  if (throwOutside) throw new Error("thrown outside any request");
}, 10);
server.listen(0, "127.0.0.1", () => process.stdout.write(`${(server.address() as AddressInfo).port}\n`));
