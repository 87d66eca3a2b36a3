internal import COpenSSL
import PeerSyncCore

/// Secure random bytes from OpenSSL's CSPRNG.
func randomBytes(_ count: Int) throws(PeerSyncError) -> [UInt8] {
    var out = [UInt8](repeating: 0, count: count)
    let rc = out.withUnsafeMutableBufferPointer { RAND_bytes($0.baseAddress, Int32($0.count)) }
    try OpenSSL.check(rc, "RAND_bytes")
    return out
}

/// SHA-256 of bytes.
func sha256(_ bytes: [UInt8]) throws(PeerSyncError) -> [UInt8] {
    var out = [UInt8](repeating: 0, count: 32)
    var length: UInt32 = 0
    let rc = bytes.withUnsafeBytes { input in
        out.withUnsafeMutableBufferPointer { output in
            EVP_Digest(input.baseAddress, input.count, output.baseAddress, &length, EVP_sha256(), nil)
        }
    }
    try OpenSSL.check(rc, "EVP_Digest(SHA-256)", succeeded: { $0 == 1 && length == 32 })
    return out
}
