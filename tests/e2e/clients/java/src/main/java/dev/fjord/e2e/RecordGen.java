package dev.fjord.e2e;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;

/**
 * The deterministic record generator shared by every client tool (see tests/e2e/README.md for the
 * definition all three languages implement byte for byte).
 */
final class RecordGen {
    final byte[] key;
    final byte[] value;
    final String[] headerKeys;
    final byte[][] headerValues;
    final long timestamp;

    private RecordGen(byte[] key, byte[] value, String[] headerKeys, byte[][] headerValues, long timestamp) {
        this.key = key;
        this.value = value;
        this.headerKeys = headerKeys;
        this.headerValues = headerValues;
        this.timestamp = timestamp;
    }

    private static byte[] sha256(String s) {
        try {
            return MessageDigest.getInstance("SHA-256").digest(s.getBytes(StandardCharsets.US_ASCII));
        } catch (NoSuchAlgorithmException e) {
            // Every JRE is required to ship SHA-256.
            throw new IllegalStateException(e);
        }
    }

    static RecordGen of(long seed, long i) {
        String prefix = "fjord-e2e:" + seed + ":" + i;
        byte[] h0 = sha256(prefix);
        int valueLen = 10 + (((h0[0] & 0xff) << 8) | (h0[1] & 0xff)) % 291;
        byte[] value = new byte[valueLen];
        int filled = 0;
        for (int k = 0; filled < valueLen; k++) {
            byte[] block = sha256(prefix + ":" + k);
            int n = Math.min(block.length, valueLen - filled);
            System.arraycopy(block, 0, value, filled, n);
            filled += n;
        }
        if (i % 3 == 0) {
            for (int j = 0; j < valueLen; j++) {
                value[j] = (byte) ('a' + (value[j] & 0xff) % 26);
            }
        }
        byte[] key = (i % 17 == 5) ? null : ("key-" + seed + "-" + i).getBytes(StandardCharsets.US_ASCII);
        int binLen = 1 + (h0[2] & 0xff) % 16;
        byte[] bin = new byte[binLen];
        System.arraycopy(h0, 3, bin, 0, binLen);
        return new RecordGen(
                key,
                value,
                new String[] {"idx", "bin"},
                new byte[][] {Long.toString(i).getBytes(StandardCharsets.US_ASCII), bin},
                seed + i);
    }
}
