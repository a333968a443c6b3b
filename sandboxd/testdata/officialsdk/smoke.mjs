// Smoke test of the official OpenSandbox TypeScript SDK against sandboxd:
// create, commands (foreground, background, logs), files, pause and resume,
// kill. Run by TestOfficialTypeScriptSDK with OPEN_SANDBOX_DOMAIN set; it
// prints one line per step and exits non-zero on the first failure.
import { ConnectionConfig, Sandbox } from "@alibaba-group/opensandbox";

const config = new ConnectionConfig({
  domain: process.env.OPEN_SANDBOX_DOMAIN,
  protocol: "http",
  requestTimeoutSeconds: 60,
});

function check(what, ok, detail) {
  if (!ok) {
    throw new Error(`${what}: ${JSON.stringify(detail)}`);
  }
  console.log(`ok ${what}`);
}

const sandbox = await Sandbox.create({
  connectionConfig: config,
  image: "host",
  timeoutSeconds: 10 * 60,
});
check("create", !!sandbox.id, sandbox.id);

const fg = await sandbox.commands.run("echo hello; echo err >&2; printf 'a\\nb\\n'");
const out = fg.logs.stdout.map((m) => m.text);
check("foreground command", out.join("|") === "hello|a|b" && fg.logs.stderr[0]?.text === "err", fg.logs);

const failed = await sandbox.commands.run("exit 3");
check("exit code", failed.error?.value === "3" || failed.exitCode === 3, { error: failed.error, exitCode: failed.exitCode });

const bg = await sandbox.commands.run("echo bg-start; sleep 0.3; echo bg-end", { background: true });
check("background command", !!bg.id, bg.id);
let status;
for (let i = 0; i < 100; i++) {
  status = await sandbox.commands.getCommandStatus(bg.id);
  if (!status.running) break;
  await new Promise((r) => setTimeout(r, 100));
}
check("background status", status.running === false && status.exitCode === 0, status);
const logs = await sandbox.commands.getBackgroundCommandLogs(bg.id);
check("background logs", logs.content === "bg-start\nbg-end\n", logs);

await sandbox.files.createDirectories([{ path: "/tmp/demo", mode: 755 }]);
await sandbox.files.writeFiles([{ path: "/tmp/demo/hello.txt", data: "Hello World", mode: 644 }]);
const content = await sandbox.files.readFile("/tmp/demo/hello.txt");
check("files write and read", content === "Hello World", content);
const found = await sandbox.files.search({ path: "/tmp/demo", pattern: "*.txt" });
check("files search", found.length === 1 && found[0].path === "/tmp/demo/hello.txt", found);
await sandbox.files.deleteDirectories(["/tmp/demo"]);

await sandbox.pause();
const paused = await sandbox.getInfo();
check("pause", paused.status.state === "Paused", paused.status);
const resumed = await sandbox.resume();
const again = await resumed.commands.run("echo resumed");
check("resume", again.logs.stdout[0]?.text === "resumed", again.logs);

await resumed.kill();
let gone = false;
try {
  await resumed.getInfo();
} catch (err) {
  gone = true;
}
check("kill", gone, "getInfo after kill answered");
await resumed.close();
console.log("PASS");
