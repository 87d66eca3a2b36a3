import Dispatch
import Foundation
import PeerSyncTransportTesting
import PeerSyncCore
import PeerSyncTestSupport

/// The Python `websockets` peer used by the interop tests.
///
/// Set-up (done by the tests themselves, once per process): a virtual environment at
/// `$TMPDIR/peersync-websockets-venv` (kept between runs as a cache) with `pip install
/// websockets`, from PyPI. `PEERSYNC_PYTHON=/path/to/python3` uses an existing interpreter that
/// has `websockets` instead. If neither works the interop tests FAIL (they are never skipped).
enum PythonPeer {
    static let venv = NSTemporaryDirectory() + "peersync-websockets-venv"

    private static let interpreter: Result<String, PeerSyncError> = setUp()

    /// The Python interpreter with `websockets`, set up on a Dispatch thread (it may run pip).
    static func python() async throws -> String {
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async { continuation.resume(with: interpreter) }
        }
    }

    private static func setUp() -> Result<String, PeerSyncError> {
        if let python = ProcessInfo.processInfo.environment["PEERSYNC_PYTHON"] {
            return hasWebsockets(python) ? .success(python)
                : .failure(PeerSyncError(.notFound, "PEERSYNC_PYTHON=\(python) cannot import websockets"))
        }
        let python = venv + "/bin/python3"
        if hasWebsockets(python) { return .success(python) }
        let (created, createOutput) = run("/usr/bin/env", ["python3", "-m", "venv", venv])
        guard created == 0 else {
            return .failure(PeerSyncError(.notFound, "cannot create a Python venv (is python3-venv installed? Tools/bootstrap python3-venv): \(createOutput)"))
        }
        let (installed, pipOutput) = run(python, ["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "websockets"])
        guard installed == 0, hasWebsockets(python) else {
            return .failure(PeerSyncError(.notFound, "cannot pip install websockets: \(pipOutput)"))
        }
        return .success(python)
    }

    private static func hasWebsockets(_ python: String) -> Bool {
        if python.hasPrefix("/") && !FileManager.default.isExecutableFile(atPath: python) { return false }
        return run(python, ["-c", "import websockets.asyncio.server, websockets.asyncio.client"]).0 == 0
    }

    /// Runs a command to completion (on the calling Dispatch thread); returns status and output.
    private static func run(_ executable: String, _ arguments: [String]) -> (Int32, String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable.hasPrefix("/") ? executable : "/usr/bin/env")
        process.arguments = executable.hasPrefix("/") ? arguments : [executable] + arguments
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        do { try process.run() } catch { return (-1, "\(error)") }
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: data, as: UTF8.self))
    }

    /// The interop script (server and client roles).
    static let script = #"""
    import asyncio, json, ssl, sys
    from websockets.asyncio.server import serve
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed, InvalidStatus, InvalidHandshake

    def out(*args):
        print(*args, flush=True)

    async def server_handler(ws):
        try:
            async for message in ws:
                if isinstance(message, str) and message.startswith("frag:"):
                    n = int(message[5:])
                    await ws.send([f"part{i};" for i in range(n)])
                elif isinstance(message, str) and message.startswith("fragbin:"):
                    n = int(message[8:])
                    await ws.send([bytes([i]) * 1000 for i in range(n)])
                elif message == "ping":
                    waiter = await ws.ping(b"py")
                    await asyncio.wait_for(waiter, 5)
                    await ws.send("pong-received")
                elif isinstance(message, str) and message.startswith("close:"):
                    await ws.close(int(message[6:]), "python closing")
                elif message == "subprotocol?":
                    await ws.send(ws.subprotocol or "none")
                elif message == "header?":
                    await ws.send(ws.request.headers.get("X-Custom", "missing"))
                else:
                    await ws.send(message)
        except ConnectionClosed:
            pass
        out("CLOSED", ws.close_code, ws.close_reason or "")

    async def run_server(args):
        ctx = None
        if args.get("cert"):
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(args["cert"], args["key"])
        kwargs = {}
        if args.get("subprotocols"):
            kwargs["subprotocols"] = args["subprotocols"]
        if args.get("acceptNoSubprotocol"):
            kwargs["select_subprotocol"] = lambda connection, offered: None
        async with serve(server_handler, "127.0.0.1", 0, ssl=ctx, max_size=2**24, ping_interval=None, **kwargs) as server:
            out("PORT", server.sockets[0].getsockname()[1])
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, sys.stdin.read)  # until the test closes stdin

    def check(condition, what):
        if not condition:
            raise AssertionError(what)

    async def run_client(args):
        ctx = None
        if args.get("cafile"):
            ctx = ssl.create_default_context(cafile=args["cafile"])
        try:
            ws = await connect(args["url"], ssl=ctx, subprotocols=args.get("subprotocols") or None,
                               additional_headers={"X-Custom": "from-python"}, max_size=2**24, ping_interval=None,
                               open_timeout=args.get("openTimeout", 10))
        except InvalidStatus as e:
            out("STATUS", e.response.status_code)
            return
        except InvalidHandshake as e:
            out("HANDSHAKE", type(e).__name__)
            return
        async with ws:
            check(ws.subprotocol == args.get("expectSubprotocol"), f"subprotocol {ws.subprotocol!r}")
            await ws.send("héllo wörld")
            check(await ws.recv() == "héllo wörld", "text echo")
            data = bytes(range(256)) * 400
            await ws.send(data)
            check(await ws.recv() == data, "binary echo")
            await ws.send(b"")
            check(await ws.recv() == b"", "empty echo")
            # Fragmented sends: our server must reassemble them.
            await ws.send(["frag-", "ment", "ed €"])
            check(await ws.recv() == "frag-mented €", "fragmented text echo")
            await ws.send([b"\x01" * 5000, b"\x02" * 5000])
            check(await ws.recv() == b"\x01" * 5000 + b"\x02" * 5000, "fragmented binary echo")
            # Our server fragments messages above its fragmentSize: count the frames.
            await ws.send("x" * 10000)
            fragments = [f async for f in ws.recv_streaming()]
            check("".join(fragments) == "x" * 10000, "reassembled echo")
            check(len(fragments) > 1, f"expected a fragmented echo, got {len(fragments)} frame(s)")
            # Ping: our server answers with a pong.
            waiter = await ws.ping(b"hello")
            await asyncio.wait_for(waiter, 5)
            # Close code chosen by our server.
            await ws.send(f"close:{args['serverCloseCode']}")
            try:
                await asyncio.wait_for(ws.recv(), 5)
                raise AssertionError("expected a close")
            except ConnectionClosed as e:
                check(e.rcvd is not None and e.rcvd.code == args["serverCloseCode"], f"close code {e.rcvd}")
                check(e.rcvd.reason == "asked to", f"close reason {e.rcvd.reason!r}")
        out("OK", len(fragments))

    async def run_client_close(args):
        ctx = ssl.create_default_context(cafile=args["cafile"]) if args.get("cafile") else None
        async with connect(args["url"], ssl=ctx, ping_interval=None, open_timeout=args.get("openTimeout", 10)) as ws:
            await ws.send("last words")
            check(await ws.recv() == "last words", "echo before close")
            await ws.close(args["code"], "python says bye")
            out("CLIENT-CLOSED", ws.close_code)

    args = json.loads(sys.argv[2])
    mode = sys.argv[1]
    if mode == "server":
        asyncio.run(run_server(args))
    elif mode == "client":
        asyncio.run(run_client(args))
    elif mode == "client-close":
        asyncio.run(run_client_close(args))
    """#
}

/// A running Python interop script (a shared ``ChildProcess``) whose output lines the test can
/// wait for. Terminated (by PID) in ``stop()``; its temporary directory is removed.
final class PythonProcess: Sendable {
    private let child: ChildProcess
    let directory: String

    private init(child: ChildProcess, directory: String) {
        self.child = child
        self.directory = directory
    }

    /// Starts `python script.py mode json` with `files` written next to the script.
    static func start(mode: String, arguments: [String: any Sendable], files: [String: String] = [:]) async throws -> PythonProcess {
        let python = try await PythonPeer.python()
        let directory = NSTemporaryDirectory() + "peersync-ws-interop-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try PythonPeer.script.write(toFile: directory + "/interop.py", atomically: true, encoding: .utf8)
        var arguments = arguments
        // The Python client's opening-handshake timeout, stretched for sanitized builds.
        arguments["openTimeout"] = TestTiming.slow(seconds: 10)
        for (name, content) in files {
            let path = directory + "/" + name
            try content.write(toFile: path, atomically: true, encoding: .utf8)
            arguments[name] = path
        }
        let json = try JSONSerialization.data(withJSONObject: arguments)
        // Standard input stays open (a pipe) until stop(): the script may wait on it.
        let child = try ChildProcess(executable: python, [directory + "/interop.py", mode, String(decoding: json, as: UTF8.self)],
                                     standardInput: true)
        return PythonProcess(child: child, directory: directory)
    }

    var output: [String] { child.output }

    /// Waits for a line starting with `prefix`; returns it.
    func waitForLine(prefix: String, timeout: Duration = .seconds(60)) async throws -> String {
        _ = await child.wait(timeout: timeout) { $0.contains { $0.hasPrefix(prefix) } }
        if let line = output.first(where: { $0.hasPrefix(prefix) }) { return line }
        if !child.isRunning {
            throw PeerSyncError(.notFound, "python exited without `\(prefix)`: \(output.joined(separator: "\n"))")
        }
        throw PeerSyncError(.timeout, "no `\(prefix)` line from python: \(output.joined(separator: "\n"))")
    }

    /// Waits for the process to exit (bounded).
    func waitForExit(timeout: Duration = .seconds(60)) async throws -> Int32 {
        guard let status = await child.waitForExit(timeout: timeout) else {
            throw PeerSyncError(.timeout, "python did not exit: \(output.joined(separator: "\n"))")
        }
        return status
    }

    func stop() {
        child.closeInput()
        child.signal(SIGTERM)
        try? FileManager.default.removeItem(atPath: directory)
    }
}
