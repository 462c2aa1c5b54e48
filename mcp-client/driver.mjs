// Drives the MCP server with the ecosystem's own client library (the official TypeScript SDK),
// as a test asks on stdin, one JSON object a line:
//   {"id": 1, "op": "connect", "http": {"url": "...", "key": "..."}}
//   {"id": 1, "op": "connect", "stdio": {"command": "...", "args": [], "env": {}}}
//   {"id": 2, "op": "list"}   {"id": 3, "op": "call", "name": "...", "arguments": {}}   {"op": "close"}
// Each answer is one line with the request's id: {"id", "ok", "result" | "error", "ms"}, `ms` the
// time the client library took over it. The server's
// URL-mode elicitations are accepted and reported as {"event": "elicitation", "params"}.
// MCP_SDK names the SDK's dist/esm folder (scripts/test installs it into target/tools).
import readline from 'node:readline';

const sdk = process.env.MCP_SDK;
const { Client } = await import(`${sdk}/client/index.js`);
const { StreamableHTTPClientTransport } = await import(`${sdk}/client/streamableHttp.js`);
const { StdioClientTransport } = await import(`${sdk}/client/stdio.js`);
const { ElicitRequestSchema } = await import(`${sdk}/types.js`);

const say = (o) => process.stdout.write(JSON.stringify(o) + '\n');
let client = null;
// Long enough for an owner's answer to a card.
const timeout = 11 * 60 * 1000;

async function handle(req) {
  switch (req.op) {
    case 'connect': {
      client = new Client(
        { name: 'grant-ledger-tests', version: '1.0.0' },
        { capabilities: { elicitation: { url: {} } } },
      );
      client.setRequestHandler(ElicitRequestSchema, async (r) => {
        say({ event: 'elicitation', params: r.params });
        return { action: 'accept' };
      });
      const transport = req.http
        ? new StreamableHTTPClientTransport(new URL(req.http.url), {
            requestInit: { headers: { authorization: `Bearer ${req.http.key}` } },
          })
        : new StdioClientTransport({ command: req.stdio.command, args: req.stdio.args, env: req.stdio.env, stderr: 'inherit' });
      await client.connect(transport);
      return { protocol: transport.protocolVersion ?? null, server: client.getServerVersion() };
    }
    case 'list':
      return (await client.listTools()).tools;
    case 'call':
      return await client.callTool({ name: req.name, arguments: req.arguments }, undefined, { timeout });
    case 'close':
      await client.close();
      return null;
    default:
      throw new Error(`no op ${req.op}`);
  }
}

const lines = readline.createInterface({ input: process.stdin });
for await (const line of lines) {
  if (!line.trim()) continue;
  const req = JSON.parse(line);
  const started = performance.now();
  try {
    const result = await handle(req);
    say({ id: req.id, ok: true, result, ms: performance.now() - started });
  } catch (e) {
    say({ id: req.id, ok: false, error: String(e && e.message ? e.message : e), code: e && e.code });
  }
  if (req.op === 'close') break;
}
process.exit(0);
