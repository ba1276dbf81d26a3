// SPDX-License-Identifier: Apache-2.0
// A pod proven by the kubelet's cgroup, not by a name (issue #62 item 2): the path's shape under
// the kubelet's roots, and the directories of a fake cgroup tree (root's, chowned, symlinked).
#include "daemon/core/pod_cgroup.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

namespace gpuos::daemon {
namespace {

constexpr const char* kPod = "9a8b7c6d-5e4f-4a3b-9c2d-1e0f9a8b7c6d";
constexpr const char* kPodSystemd = "9a8b7c6d_5e4f_4a3b_9c2d_1e0f9a8b7c6d";
const std::vector<std::string> kRoots{"/kubepods.slice", "/kubepods"};

std::string pod_of(const std::string& path, std::size_t* depth = nullptr, std::string* why = nullptr) {
  std::size_t d = 0;
  std::string w;
  std::string uid = pod_of_kubelet_path(path, kRoots, &d, &w);
  if (depth) *depth = d;
  if (why) *why = w;
  return uid;
}

TEST(PodCgroup, TheKubeletsPodCgroupsAndNoOthers) {
  const std::string sd = std::string("-pod") + kPodSystemd + ".slice";
  std::size_t depth = 0;
  // The systemd driver: besteffort, burstable, guaranteed (no QoS slice); the container below it.
  EXPECT_EQ(pod_of("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort" + sd + "/cri-containerd-ab.scope",
                   &depth),
            kPod);
  EXPECT_EQ(depth, 3u);
  EXPECT_EQ(pod_of("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable" + sd + "/crio-1.scope"), kPod);
  EXPECT_EQ(pod_of("/kubepods.slice/kubepods" + sd + "/crio-1.scope", &depth), kPod);
  EXPECT_EQ(depth, 2u);
  // The cgroupfs driver.
  EXPECT_EQ(pod_of(std::string("/kubepods/burstable/pod") + kPod + "/abc", &depth), kPod);
  EXPECT_EQ(depth, 3u);
  EXPECT_EQ(pod_of(std::string("/kubepods/pod") + kPod), kPod);
  // A root of the admin's (the kubelet's --cgroup-root under systemd: names nest).
  std::size_t d = 0;
  std::string why;
  const std::vector<std::string> custom{"/kubelet.slice/kubelet-kubepods.slice"};
  EXPECT_EQ(pod_of_kubelet_path("/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
                                "kubelet-kubepods-besteffort" + sd + "/x.scope",
                                custom, &d, &why),
            kPod);

  // Forged: in a user's delegated subtree, a pod-like name in the wrong place, a wrong QoS, dashes
  // under the systemd driver, "..", ".", "//", a root's name as a prefix of another's.
  for (const std::string& forged : {
           "/user.slice/user-65534.slice/user@65534.service/app.slice/pod" + std::string(kPod) + ".scope",
           "/user.slice/user-1000.slice/user@1000.service/kubepods.slice/kubepods" + sd,
           "/kubepods.slice/pod" + std::string(kPod) + ".slice",
           "/kubepods.slice/kubepods-besteffort.slice/kubepods-burstable" + sd,
           "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + std::string(kPod) + ".slice",
           "/kubepods.slice/kubepods-besteffort.slice/x/kubepods-besteffort" + sd,
           "/kubepods/burstable/x/pod" + std::string(kPod),
           "/kubepods/pod" + std::string(kPod) + ".scope",
           "/kubepods/pod" + std::string(kPodSystemd),
           "/../kubepods/pod" + std::string(kPod),
           "/kubepods/../kubepods/pod" + std::string(kPod),
           "/kubepods/./pod" + std::string(kPod),
           "/kubepods//pod" + std::string(kPod),
           "/kubepods-x/pod" + std::string(kPod),
           "kubepods/pod" + std::string(kPod),
       }) {
    EXPECT_EQ(pod_of(forged, nullptr, &why), "") << forged;
    EXPECT_NE(why, "") << forged;
  }
  pod_of("/user.slice/user-65534.slice/pod" + std::string(kPod) + ".scope", nullptr, &why);
  EXPECT_NE(why.find("not under the kubelet's cgroup roots (/kubepods.slice, /kubepods)"), std::string::npos) << why;
  pod_of("/../../kubepods/pod" + std::string(kPod), nullptr, &why);
  EXPECT_NE(why.find("\"..\""), std::string::npos) << why;
}

// A fake cgroup v2 mount in a temp dir: directories created as root (the test runs as root in CI;
// elsewhere the ownership cases are skipped).
class PodCgroupTree : public ::testing::Test {
 protected:
  void SetUp() override {
    mount_ = std::filesystem::temp_directory_path() / ("gpuos-cgroup-" + std::to_string(getpid()));
    std::filesystem::remove_all(mount_);
    std::filesystem::create_directories(dir(container_));
    ::chmod(mount_.c_str(), 0755);  // 0755 all the way down, whatever the umask
    for (const auto& e : std::filesystem::recursive_directory_iterator(mount_)) ::chmod(e.path().c_str(), 0755);
    cgroups_.mount = mount_.string();
  }
  void TearDown() override { std::filesystem::remove_all(mount_); }
  PodOfProcess of(const std::string& path) const { return pod_of_cgroup_text("0::" + path + "\n", cgroups_); }
  std::filesystem::path dir(const std::string& path) const { return mount_ / path.substr(1); }

  std::filesystem::path mount_;
  PodCgroups cgroups_;
  const std::string qos_ = "/kubepods.slice/kubepods-besteffort.slice";
  const std::string pod_path_ = qos_ + "/kubepods-besteffort-pod" + std::string(kPodSystemd) + ".slice";
  const std::string container_ = pod_path_ + "/cri-containerd-ab.scope";
};

TEST_F(PodCgroupTree, EveryDirectoryMustBeRootsAlone) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to make root's and another user's directories";
  EXPECT_EQ(of(container_).uid, kPod) << of(container_).refusal;
  EXPECT_EQ(of(container_).refusal, "");

  // A directory of the path that another user owns: a subtree delegated to it.
  ASSERT_EQ(::chown(dir(container_).c_str(), 65534, 65534), 0);
  PodOfProcess p = of(container_);
  EXPECT_EQ(p.uid, "");
  EXPECT_NE(p.refusal.find("owned by uid 65534"), std::string::npos) << p.refusal;
  EXPECT_NE(p.refusal.find(kPodSystemd), std::string::npos) << p.refusal;  // (the directory, named)
  ASSERT_EQ(::chown(dir(container_).c_str(), 0, 0), 0);
  ASSERT_EQ(::chown(dir(qos_).c_str(), 1000, 0), 0);
  EXPECT_NE(of(container_).refusal.find("owned by uid 1000"), std::string::npos) << of(container_).refusal;
  ASSERT_EQ(::chown(dir(qos_).c_str(), 0, 0), 0);

  // Writable by others than root: anyone could make a pod's name below it.
  ::chmod(dir(pod_path_).c_str(), 0777);
  EXPECT_NE(of(container_).refusal.find("writable by others"), std::string::npos) << of(container_).refusal;
  ::chmod(dir(pod_path_).c_str(), 0755);
  EXPECT_EQ(of(container_).uid, kPod);

  // A directory that is not there (gone, or not gpuosd's view of the host's tree).
  EXPECT_NE(of(pod_path_ + "/cri-containerd-gone.scope").refusal.find("cannot read"), std::string::npos);

  // A symlink in the path's place, to a real root-owned pod directory elsewhere.
  const std::filesystem::path elsewhere = mount_ / "elsewhere";
  std::filesystem::rename(dir(pod_path_), elsewhere);
  std::filesystem::create_directory_symlink(elsewhere, dir(pod_path_));
  EXPECT_NE(of(container_).refusal.find("no directory: "), std::string::npos) << of(container_).refusal;
}

TEST_F(PodCgroupTree, NamesElsewhereAreRefusedAndNoNameIsNoPod) {
  // A user's own cgroup with the pod's name: refused, with the reason (no directory is even read).
  const std::string forged = "/user.slice/user-65534.slice/user@65534.service/pod" + std::string(kPod) + ".scope";
  PodOfProcess p = of(forged);
  EXPECT_EQ(p.uid, "");
  EXPECT_NE(p.refusal.find("not under the kubelet's cgroup roots"), std::string::npos) << p.refusal;
  // No pod named at all: no pod, nothing to refuse (a host process, a container of no pod).
  p = of("/user.slice/user-1000.slice/session-2.scope");
  EXPECT_EQ(p.uid, "");
  EXPECT_EQ(p.refusal, "");
  // cgroup v1 lines only: nothing proves the pod they name.
  p = pod_of_cgroup_text("4:memory:/kubepods/pod" + std::string(kPod) + "/x\n", cgroups_);
  EXPECT_EQ(p.uid, "");
  EXPECT_NE(p.refusal.find("no cgroup v2 path"), std::string::npos) << p.refusal;
  EXPECT_EQ(cgroup_v2_path("1:cpu:/a\n0::/b/c\n"), "/b/c");
}

// systemd marks a delegated cgroup (trusted.delegate, user.delegate for a user's manager): the
// kubelet's slices down to the pod's never are; a runtime's container scope below is (to root).
TEST_F(PodCgroupTree, ADelegationMarkAboveThePodIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root";
  if (::lsetxattr(dir(container_).c_str(), "trusted.delegate", "1", 1, 0) != 0) {
    GTEST_SKIP() << "no trusted xattrs on this file system";
  }
  EXPECT_EQ(of(container_).uid, kPod) << of(container_).refusal;
  ASSERT_EQ(::lsetxattr(dir(qos_).c_str(), "trusted.delegate", "1", 1, 0), 0);
  EXPECT_NE(of(container_).refusal.find("delegated"), std::string::npos) << of(container_).refusal;
}

}  // namespace
}  // namespace gpuos::daemon
