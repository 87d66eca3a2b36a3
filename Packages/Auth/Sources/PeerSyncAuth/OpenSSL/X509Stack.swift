internal import COpenSSL
import PeerSyncCore

/// An owned `STACK_OF(X509)` whose entries hold their own references; freed with them.
/// Used only within one synchronous call.
final class X509Stack {
    let pointer: OpaquePointer

    init(_ certificates: [X509Handle]) throws(PeerSyncError) {
        pointer = try OpenSSL.check(peersync_sk_X509_new_null(), "sk_X509_new_null")
        for cert in certificates {
            try OpenSSL.check(peersync_sk_X509_push_ref(pointer, cert.pointer), "sk_X509_push")
        }
    }

    deinit { peersync_sk_X509_pop_free(pointer) }

    /// The entries of a borrowed stack, each with a new reference.
    static func handles(of stack: OpaquePointer?) -> [X509Handle] {
        guard let stack else { return [] }
        var out: [X509Handle] = []
        let count = peersync_sk_X509_num(stack)
        for i in 0..<count {
            if let x = peersync_sk_X509_value(stack, i) { out.append(X509Handle(retaining: x)) }
        }
        return out
    }

    /// Frees a stack returned to us (with its entries' references).
    static func free(_ stack: OpaquePointer) { peersync_sk_X509_pop_free(stack) }
}
