/// A small command-line parser: options (`--name value`, `--flag`) anywhere, positionals in
/// order. Unknown options are usage errors.
struct Arguments {
    private(set) var positionals: [String] = []
    private var values: [String: String] = [:]
    private var flags: Set<String> = []

    /// `valueOptions` take a value; `flagOptions` do not. Names without the leading dashes.
    init(_ args: some Sequence<String>, valueOptions: Set<String>, flagOptions: Set<String>) throws(UsageError) {
        var iterator = args.makeIterator()
        var onlyPositionals = false
        while let arg = iterator.next() {
            if onlyPositionals || !arg.hasPrefix("--") || arg == "-" {
                positionals.append(arg)
                continue
            }
            if arg == "--" { onlyPositionals = true; continue }
            var name = String(arg.dropFirst(2))
            var inlineValue: String?
            if let eq = name.firstIndex(of: "=") {
                inlineValue = String(name[name.index(after: eq)...])
                name = String(name[..<eq])
            }
            if valueOptions.contains(name) {
                guard let value = inlineValue ?? iterator.next() else {
                    throw UsageError("option --\(name) needs a value")
                }
                values[name] = value
            } else if flagOptions.contains(name), inlineValue == nil {
                flags.insert(name)
            } else {
                throw UsageError("unknown option --\(name)")
            }
        }
    }

    func value(_ name: String) -> String? { values[name] }
    func flag(_ name: String) -> Bool { flags.contains(name) }

    func int(_ name: String) throws(UsageError) -> Int? {
        guard let text = values[name] else { return nil }
        guard let n = Int(text), n >= 0 else { throw UsageError("--\(name) needs a non-negative integer, got '\(text)'") }
        return n
    }

    func positional(_ index: Int, _ what: String) throws(UsageError) -> String {
        guard index < positionals.count else { throw UsageError("missing \(what)") }
        return positionals[index]
    }

    func expectPositionals(_ count: Int) throws(UsageError) {
        if positionals.count > count {
            throw UsageError("unexpected argument '\(positionals[count])'")
        }
    }
}

/// A mistake in how the command was called: exit code 2.
struct UsageError: Error {
    let message: String
    init(_ message: String) { self.message = message }
}
