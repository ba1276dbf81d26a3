// SPDX-License-Identifier: Apache-2.0
#include "common/kube_names.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "common/files.h"

namespace gpuos {
namespace {

TEST(KubeNames, LabelsAreLowercaseAlnumWithInnerDashes) {
  EXPECT_TRUE(dns_label("default"));
  EXPECT_TRUE(dns_label("a-b-1"));
  EXPECT_TRUE(dns_label(std::string(63, 'a')));
  EXPECT_FALSE(dns_label(std::string(64, 'a')));
  for (const char* bad : {"", "-a", "a-", "A", "a.b", "a_b", "a b"}) EXPECT_FALSE(dns_label(bad)) << bad;
}

TEST(KubeNames, SubdomainsAreDottedLabelsWithinTheirLength) {
  EXPECT_TRUE(dns_subdomain("gpu.gpuos.io"));
  EXPECT_TRUE(dns_subdomain("a"));
  for (const char* bad : {"", ".", "a.", ".a", "a..b", "a.-b", "Gpu.io"}) EXPECT_FALSE(dns_subdomain(bad)) << bad;
  EXPECT_TRUE(dns_subdomain(std::string(63, 'a') + "." + std::string(63, 'b')));
  EXPECT_FALSE(dns_subdomain(std::string(63, 'a') + "." + std::string(63, 'b'), 63));  // a driver name's limit
}

TEST(KubeNames, UidsNameDirectoriesSoOnlyTheirCharactersPass) {
  EXPECT_TRUE(kube_uid("2f1c9a3e-6b7d-4e8f-9a0b-1c2d3e4f5a6b"));
  EXPECT_TRUE(kube_uid("claim-1"));
  EXPECT_FALSE(kube_uid(std::string(37, 'a')));
  for (const char* bad : {"", "-", "---", "../x", "a/b", ".", "A", "a b", "a\nb"}) EXPECT_FALSE(kube_uid(bad)) << bad;
}

class MakeDirs : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpuos-mkdirs-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override { std::system(("rm -rf " + root_).c_str()); }
  static mode_t mode_of(const std::string& p) {
    struct stat st {};
    return ::stat(p.c_str(), &st) == 0 ? (st.st_mode & 07777) : 0;
  }
  std::string root_;
};

TEST_F(MakeDirs, CreatesParentsWithTheirModeAndTheLeafWithItsOwnWhateverTheUmask) {
  const mode_t old = ::umask(077);
  std::string err;
  const bool ok = make_dirs(root_ + "/a/b/c", 0711, 0755, &err);
  ::umask(old);
  ASSERT_TRUE(ok) << err;
  EXPECT_EQ(mode_of(root_ + "/a"), 0755u);
  EXPECT_EQ(mode_of(root_ + "/a/b"), 0755u);
  EXPECT_EQ(mode_of(root_ + "/a/b/c"), 0711u);
}

TEST_F(MakeDirs, LeavesAnExistingDirectoryAsItIs) {
  ASSERT_EQ(::chmod(root_.c_str(), 0700), 0);
  std::string err;
  ASSERT_TRUE(make_dirs(root_, 0755, 0755, &err)) << err;
  EXPECT_EQ(mode_of(root_), 0700u);
}

TEST_F(MakeDirs, AFileInTheWayIsAnErrorThatNamesIt) {
  std::ofstream(root_ + "/file") << "x";
  std::string err;
  EXPECT_FALSE(make_dirs(root_ + "/file/sub", 0755, 0755, &err));
  EXPECT_NE(err.find(root_ + "/file"), std::string::npos) << err;
}

}  // namespace
}  // namespace gpuos
