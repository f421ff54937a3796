package io.streamfold.fs;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Hadoop's local file system (checksums and all) without a child process per file.
 *
 * <p>Why: without Hadoop's native library, RawLocalFileSystem sets a new file's permissions by running
 * {@code chmod}, and FileContext's rename runs {@code readlink}: a fork and exec from the Spark JVM for
 * every checkpoint file (offsets, commits, each state store's changelog), dozens per micro-batch. Idle
 * batches spent a fifth of their time there. This sets permissions through java.nio instead. It is used
 * for file: paths together with Spark's FileSystem-based checkpoint manager, whose rename is a plain
 * File.renameTo (pipeline/spark.py).
 */
public final class ForklessLocalFileSystem extends LocalFileSystem {
  public ForklessLocalFileSystem() {
    super(new Raw());
  }

  /** The raw file system under the checksums: permissions through java.nio, not {@code chmod}. */
  public static final class Raw extends RawLocalFileSystem {
    private static final PosixFilePermission[] BITS = {  // from 0400 down to 0001
      PosixFilePermission.OWNER_READ, PosixFilePermission.OWNER_WRITE, PosixFilePermission.OWNER_EXECUTE,
      PosixFilePermission.GROUP_READ, PosixFilePermission.GROUP_WRITE, PosixFilePermission.GROUP_EXECUTE,
      PosixFilePermission.OTHERS_READ, PosixFilePermission.OTHERS_WRITE, PosixFilePermission.OTHERS_EXECUTE,
    };

    @Override
    public void setPermission(Path p, FsPermission permission) throws IOException {
      Files.setPosixFilePermissions(pathToFile(p).toPath(), posix(permission.toShort()));
    }

    static Set<PosixFilePermission> posix(short mode) {
      Set<PosixFilePermission> set = EnumSet.noneOf(PosixFilePermission.class);
      for (int i = 0; i < BITS.length; i++) {
        if ((mode & (0400 >> i)) != 0) set.add(BITS[i]);
      }
      return set;
    }
  }
}
