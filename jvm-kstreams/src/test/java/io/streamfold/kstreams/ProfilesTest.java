package io.streamfold.kstreams;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import java.util.List;
import org.junit.jupiter.api.Test;

/** LeanTopology's users store: envelopes read as typed rows, and the binary form read back as written. */
class ProfilesTest {
  @Test
  void anEnvelopeReadsAsItsCarriedColumnsAndTheStoreFormRoundTrips() {
    Profiles.Profile read =
        Profiles.read(ClicksTopologyTest.change("u", "User_1", "Region_3", 42).getBytes());
    assertEquals(new Profiles.Profile("Region_3", "FEMALE", List.of("News"), 1665780367000L, 42L), read);
    assertEquals(read, Profiles.read(Profiles.write(read)));
    Profiles.Profile sparse = new Profiles.Profile(null, null, null, null, null);
    assertEquals(sparse, Profiles.read(Profiles.write(sparse)));
  }

  @Test
  void aSnapshotRowIsValidSinceForeverAndADeleteOrHeartbeatIsNoRow() {
    assertNull(Profiles.read(ClicksTopologyTest.change("r", "User_1", "R", 7).getBytes()).validFrom());
    assertNull(Profiles.read(ClicksTopologyTest.delete("User_1", 7).getBytes()));
    assertNull(Profiles.read(ClicksTopologyTest.HEARTBEAT.getBytes()));
    assertNull(Profiles.read(null));
  }
}
